/**
 * @file run_record.h
 * @brief OUT/config.json: the record of what a run is, every option as resolved.
 *
 * Rank 0 writes it atomically (base/file_io.h) when the run claims --out, before step 1:
 *   {"version": build_version() (base/version.h), "run_id": "<16 hex digits>",
 *    "start": "new" | "resume", "resumed_from_step": N (resume only),
 *    "config": {every field of TrainConfig after resolution: data patterns and the files they
 *               matched, model (name, source, path, its dimensions), device, attention and its
 *               kernel choices, precision, B, T, total batch, gradient accumulation, ranks and
 *               their communication, steps, the learning-rate schedule, AdamW, validation,
 *               sampling, checkpoints, --out, --resume/--overwrite, the non-finite policy, seed}}
 * A resume rewrites it with the resuming command's values: what a resume may not change is
 * checked against the checkpoint first (run_files.h, check_resume_compatible), so the file
 * always describes the command that continues the run, and "start" says it was a resume.
 * A new field of TrainConfig belongs in train_config_json() too.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"

namespace gpt2 {

struct TrainConfig;

std::string config_record_path(const std::string& out_dir);  // OUT/config.json

/// The files the run's data patterns matched (empty when not known, e.g. in tests).
struct RunDataFiles {
  std::vector<std::string> train;
  std::vector<std::string> val;
};

/// The "config" object of config.json.
Json train_config_json(const TrainConfig& config, const RunDataFiles& files = {});

/// Writes OUT/config.json atomically. resumed_from_step: the checkpoint's step on a resume.
void write_config_record(const TrainConfig& config, uint64_t run_id,
                         std::optional<int64_t> resumed_from_step, const RunDataFiles& files);

}  // namespace gpt2
