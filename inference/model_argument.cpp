#include "inference/model_argument.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "base/error.h"
#include "base/file_io.h"
#include "model/config.h"
#include "model/hf_checkpoint.h"
#include "model/run_folder.h"

namespace gpt2 {

const char* to_string(ModelSource source) {
  switch (source) {
    case ModelSource::kInit: return "init";
    case ModelSource::kLlmcFile: return "llm.c checkpoint";
    case ModelSource::kHfDirectory: return "Hugging Face";
  }
  return "unknown";
}

DeviceAvailability probe_devices() {
  DeviceAvailability devices;
  devices.cuda = cuda_backend_available(&devices.why_not);
  return devices;
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  GPT2_USAGE_FAIL("--precision must be fp32 or bf16 (got '", name, "')");
}

namespace {

// A folder gpt2-train wrote (run.json) without Hugging Face weights: its config.json is the
// run's record (run_record.h), not a model's configuration.
bool is_run_folder(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec) && file_exists(run_record_path(dir)) &&
         !file_exists((std::filesystem::path(dir) / kHfWeightsFile).string());
}

}  // namespace

ModelArgument resolve_model_argument(const std::string& name) {
  ModelArgument model;
  if (is_model_preset(name)) {
    if (!hf_model_dir_of("./" + name).empty() && !is_run_folder("./" + name))
      GPT2_USAGE_FAIL("--model ", name, " is both a preset and a directory holding ",
                      kHfConfigFile, ": write hf:", name, " (or ./", name,
                      ") for the directory, or run from elsewhere for the preset");
    return model;
  }
  if (is_run_folder(name)) {
    const std::vector<std::string> states = training_state_files(name);
    const std::string newest =
        states.empty() ? std::string("model_<step>.bin")
                       : model_checkpoint_path(name, training_state_step(states.back()));
    GPT2_FAIL("--model ", name, " is a gpt2-train run folder (its ", kHfConfigFile,
              " records the run; it is not a Hugging Face model directory): pass one of its "
              "model files, e.g. ", newest);
  }
  // hf:DIR, or a directory holding config.json; throws (exit 1) for an hf: path that is not one.
  if (const std::string hf_dir = hf_model_dir_of(name); !hf_dir.empty()) {
    model.source = ModelSource::kHfDirectory;
    model.path = hf_dir;
    return model;
  }
  if (std::error_code ec; std::filesystem::is_directory(name, ec))
    GPT2_FAIL("--model ", name, ": a directory without ", kHfConfigFile, " (a Hugging Face model "
              "directory holds ", kHfConfigFile, " and ", kHfWeightsFile, ")");
  if (file_exists(name)) {
    model.source = ModelSource::kLlmcFile;
    model.path = name;
    return model;
  }
  // A path is a file the machine lacks, not a bad option: exit code 1, like a missing shard.
  if (name.find('/') != std::string::npos || name.find('.') != std::string::npos)
    GPT2_FAIL("--model ", name, ": no such file (--model takes a preset name such as d12 or "
              "gpt2, an llm.c model file, or hf:DIR)");
  return model;
}

}  // namespace gpt2
