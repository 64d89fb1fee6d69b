/**
 * @file model_argument.h
 * @brief The model options gpt2-train and gpt2-generate share: what a --model value names (a
 *        preset, an llm.c model file or a Hugging Face directory), whether --device cuda can
 *        run here, and --precision.
 *
 * A gpt2-train --out folder (model/run_folder.h: it holds run.json) is no model: its config.json
 * is the run's record, so --model refuses it and names one of its model files instead.
 * Bad values throw gpt2::UsageError (exit 2); a path the machine lacks or cannot read throws
 * gpt2::Error (exit 1).
 */
#pragma once

#include <string>

#include "model/model.h"

namespace gpt2 {

/// Where the model's parameters come from (--model).
enum class ModelSource {
  kInit,         // a preset (dN, gpt2, ...): GPT-2's initialization from --seed
  kLlmcFile,     // an llm.c model file
  kHfDirectory,  // a Hugging Face directory: hf:DIR, or a directory holding config.json
};
const char* to_string(ModelSource source);  // "init" | "llm.c checkpoint" | "Hugging Face"

/// What a --model value names (gpt2-train and gpt2-generate): a preset (path empty), an llm.c
/// model file or a Hugging Face directory (path: the file or directory). Throws
/// gpt2::UsageError for a preset name that is also a directory holding config.json in the
/// current folder (ambiguous: "write hf:NAME"), gpt2::Error (exit 1) for a path that is not
/// there, a directory without config.json, or a bad hf: directory; an unknown name that looks
/// like no path is left to the preset lookup (kInit, its "unknown model" usage error).
struct ModelArgument {
  ModelSource source = ModelSource::kInit;
  std::string path;
};
ModelArgument resolve_model_argument(const std::string& name);

/// Whether a CUDA backend can run here, and why not (shown by `--device cuda`).
struct DeviceAvailability {
  bool cuda = false;
  std::string why_not;
};
DeviceAvailability probe_devices();

/// "fp32" | "bf16"; throws gpt2::UsageError naming --precision.
Precision parse_precision(const std::string& name);

}  // namespace gpt2
