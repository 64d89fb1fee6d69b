/**
 * @file training_state.h
 * @brief The training-state file that pairs with a model file (model/checkpoint.h) for bitwise
 *        resume: step, loader position, sampling RNG, the run's identity, AdamW m and v, and the
 *        model's precision state (--precision fp8's scales).
 *
 * The training-state file (this project): 256 int64 header — [0] magic 20261122, [1] version 4,
 * [2] step, [3] number of parameters, [4] B, [5] T, [6] total batch tokens, [7] seed,
 * [8] world size, [9..11] loader position, [12..15] sampling RNG state, [16] FNV-1a 64 hash of
 * the header (this slot read as 0) and the payload, [17] payload bytes, [18] FNV-1a 64 hash of
 * the whole model file of the pair, [19] its size in bytes, [20..51] its file name (256 bytes,
 * NUL-padded), and from version 3: [52] the run id, [53] the skipped-step streak and [54] the
 * updates skipped so far, [55..63] the run's settings (TrainingSettings: --steps, --lr,
 * --warmup-steps, --lr-schedule, --final-lr-frac, --weight-decay, --grad-clip, --on-nonfinite
 * and the streak that stops a run; floats as their IEEE bits), [64] the context-parallel group
 * size (0, as before it was recorded: 1), and from version 4: [65] the bytes of the precision
 * state — then AdamW m and v (fp32, num_parameters each), then the precision state (the
 * model's opaque bytes, Model::precision_state: the FP8 scales and amax histories of a
 * --precision fp8 run, none otherwise). So a state names and checks the model file it belongs
 * to; a flipped byte anywhere in either file is found. Version 3 files are read with no
 * precision state, version 2 files (no run id, streak or settings) with run_id 0, a streak of 0
 * and no settings; version 1 files (no model hash) are refused. A data-parallel job writes the same files from rank 0, its ZeRO-1 shards of m and v
 * gathered first, so they hold the whole state whatever the world size; [8] and [64] record
 * the job's shape, and a resume needs the same (train/run_files.h).
 *
 * Every write is atomic (temporary name, fsync, rename). Every read validates and throws
 * gpt2::Error naming the file and the problem (bad magic/version, size mismatch, hash mismatch).
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/rng.h"
#include "data/dataloader.h"
#include "model/checkpoint.h"

namespace gpt2 {

constexpr int64_t kStateMagic = 20261122;
constexpr int64_t kStateVersion = 4;

/// The settings that decide a run's course and its end, as a training state records them (the
/// enums as their numeric values: LrScheduleKind, NonFinitePolicy in train/).
struct TrainingSettings {
  int64_t steps = 0;
  float max_lr = 0.0f;
  int64_t warmup_steps = 0;
  int64_t lr_schedule = 0;
  float final_lr_frac = 0.0f;
  float weight_decay = 0.0f;
  float grad_clip = 0.0f;
  int64_t on_nonfinite = 0;
  int64_t max_skipped_in_a_row = 0;  // the streak of skipped updates that stops the run
  bool operator==(const TrainingSettings& o) const;
};

struct TrainingState {
  int64_t version = kStateVersion;  // as read (2 to 4); written as kStateVersion
  int64_t step = 0;  // optimizer steps completed
  int64_t num_parameters = 0;
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  int64_t total_batch_size = 0;
  int64_t seed = 0;
  int64_t world_size = 1;
  int64_t context_parallel = 1;  // ranks sharing each sequence (version 3; 1 when not recorded)
  LoaderPosition loader;
  Rng::State sample_rng{};
  std::string model_file;      // file name (no folder) of the model file of the pair
  ModelFileDigest model_digest;  // what that file must hash to
  uint64_t run_id = 0;           // the run that wrote it; 0 in a version 2 state
  int64_t skipped_in_a_row = 0;  // updates skipped in a row up to this step (skip-step)
  int64_t skipped_total = 0;     // updates skipped in the run up to this step
  std::optional<TrainingSettings> settings;  // none in a version 2 state
  std::vector<float> adam_m;
  std::vector<float> adam_v;
  std::vector<uint8_t> precision_state;  // Model::precision_state (version 4; empty before)
};

void write_training_state(const std::string& path, const TrainingState& state);
TrainingState read_training_state(const std::string& path);

}  // namespace gpt2
