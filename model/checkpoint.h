/**
 * @file checkpoint.h
 * @brief Model checkpoints in llm.c's format, and the training-state file for bitwise resume.
 *
 * Model file (llm.c): 256 little-endian int32 — [0] magic 20240326, [1] version (3 = fp32
 * parameters, 5 = bf16), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp — then all parameters
 * in ParameterLayout order. llm.c's gpt2_124M.bin loads; bf16 files are widened to fp32 on read.
 *
 * Training-state file (this project): 256 int64 header — [0] magic 20261122, [1] version 1,
 * [2] step, [3] number of parameters, [4] B, [5] T, [6] total batch tokens, [7] seed,
 * [8] world size, [9..11] loader position, [12..15] sampling RNG state, [16] FNV-1a hash of the
 * payload, [17] payload bytes — then AdamW m and v (fp32, num_parameters each).
 *
 * Every write is atomic (temporary name, fsync, rename). Every read validates and throws
 * gpt2::Error naming the file and the problem (bad magic/version, size mismatch, hash mismatch).
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "kernels/common/rng.h"
#include "model/config.h"

namespace gpt2 {

constexpr int32_t kModelMagic = 20240326;
constexpr int32_t kModelVersionFp32 = 3;
constexpr int32_t kModelVersionBf16 = 5;
constexpr int64_t kStateMagic = 20261122;
constexpr int64_t kStateVersion = 1;

struct ModelCheckpoint {
  ModelConfig config;
  std::vector<float> params;  // ParameterLayout order
};

/// version: kModelVersionFp32 (exact) or kModelVersionBf16 (round-to-nearest-even).
void write_model_checkpoint(const std::string& path, const ModelConfig& config,
                            const float* params, int32_t version = kModelVersionFp32);
ModelCheckpoint read_model_checkpoint(const std::string& path);
/// Header only (config), without reading the parameters.
ModelConfig read_model_checkpoint_config(const std::string& path);

struct TrainingState {
  int64_t step = 0;  // optimizer steps completed
  int64_t num_parameters = 0;
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  int64_t total_batch_size = 0;
  int64_t seed = 0;
  int64_t world_size = 1;
  LoaderPosition loader;
  Rng::State sample_rng{};
  std::vector<float> adam_m;
  std::vector<float> adam_v;
};

void write_training_state(const std::string& path, const TrainingState& state);
TrainingState read_training_state(const std::string& path);

}  // namespace gpt2
