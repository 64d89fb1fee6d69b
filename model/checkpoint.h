/**
 * @file checkpoint.h
 * @brief Model checkpoints in llm.c's format, and the digest a training state records of them.
 *
 * Model file (llm.c): 256 little-endian int32 — [0] magic 20240326, [1] version (3 = fp32
 * parameters, 5 = bf16), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp — then all parameters
 * in ParameterLayout order. llm.c's gpt2_124M.bin loads; bf16 files are widened to fp32 on read.
 * The training state that pairs with a model file for bitwise resume is train/training_state.h.
 *
 * Every write is atomic (temporary name, fsync, rename). Every read validates and throws
 * gpt2::Error naming the file and the problem (bad magic/version, size mismatch, hash mismatch).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace gpt2 {

constexpr int32_t kModelMagic = 20240326;
constexpr int32_t kModelVersionFp32 = 3;
constexpr int32_t kModelVersionBf16 = 5;
/// Longest model file name a training state can record.
constexpr size_t kMaxModelFileName = 255;

/// FNV-1a 64 of a whole model file and its size: what a training state records of its model.
struct ModelFileDigest {
  uint64_t hash = 0;
  uint64_t bytes = 0;
  bool operator==(const ModelFileDigest& o) const { return hash == o.hash && bytes == o.bytes; }
  bool operator!=(const ModelFileDigest& o) const { return !(*this == o); }
};

struct ModelCheckpoint {
  ModelConfig config;
  std::vector<float> params;  // ParameterLayout order
  ModelFileDigest digest;     // of the file as read
};

/// version: kModelVersionFp32 (exact) or kModelVersionBf16 (round-to-nearest-even). Returns the
/// digest of the file written.
ModelFileDigest write_model_checkpoint(const std::string& path, const ModelConfig& config,
                                       const float* params, int32_t version = kModelVersionFp32);
ModelCheckpoint read_model_checkpoint(const std::string& path);
/// Header only (config), without reading the parameters.
ModelConfig read_model_checkpoint_config(const std::string& path);

}  // namespace gpt2
