/**
 * @file training_state_test.cpp
 * @brief Tests for train/training_state.h: the training-state file of a checkpoint pair.
 *
 * Round trip of every field (int64 extremes, RNG words, float settings as bits, the precision
 * state's bytes); corruption anywhere (a flipped bit in the header or the payload, the
 * precision state included, truncation, trailing bytes, magic, version, a precision state's
 * length that does not add up) is rejected with a message naming the file and the problem;
 * version 3 and version 2 states still read; a write that fails as the disk fills up leaves the
 * old file intact. Each test runs in its own mkdtemp folder, removed afterwards.
 */
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "base/rng.h"
#include "model/checkpoint.h"
#include "model/parameters.h"
#include "test_fixtures.h"
#include "train/training_state.h"

namespace gpt2 {
namespace {

using testing::tiny_config;

class TrainingStateTest : public testing::ScratchDirTest {
 protected:
  TrainingStateTest() : ScratchDirTest("gpt2_training_state") {}
  TrainingState read_as_version(int64_t version);
};

TrainingState sample_state(int64_t num_parameters) {
  TrainingState s;
  s.step = 1234;
  s.num_parameters = num_parameters;
  s.batch_size = 4;
  s.seq_len = 64;
  s.total_batch_size = 4 * 64 * 8;
  s.seed = -77;  // any int64 round trips
  s.world_size = 2;
  s.loader = {3, 5, 17};
  s.sample_rng = {0xFFFFFFFFFFFFFFFFull, 1ull, 0x8000000000000000ull, 0x0123456789ABCDEFull};
  s.model_file = "model_00001234.bin";
  s.model_digest = {0xFEDCBA9876543210ull, 123456789ull};
  s.run_id = 0x9E3779B97F4A7C15ull;
  s.skipped_in_a_row = 7;
  s.skipped_total = 9;
  TrainingSettings settings;
  settings.steps = 5000;
  settings.max_lr = 6e-4f;
  settings.warmup_steps = 700;
  settings.lr_schedule = 1;
  settings.final_lr_frac = 0.1f;
  settings.weight_decay = 0.1f;
  settings.grad_clip = 1.0f;
  settings.on_nonfinite = 1;
  settings.max_skipped_in_a_row = 10;
  s.settings = settings;
  Rng rng(9);
  for (int64_t i = 0; i < num_parameters; ++i) {
    s.adam_m.push_back(static_cast<float>(rng.normal()));
    s.adam_v.push_back(static_cast<float>(rng.uniform()));
  }
  for (int i = 0; i < 37; ++i)
    s.precision_state.push_back(static_cast<uint8_t>(rng.next_u64() >> 56));
  return s;
}

// The FNV-1a 64 hash a state's header slot 16 holds: over the header with that slot 0, then the
// payload.
void rehash(std::vector<unsigned char>& bytes) {
  std::vector<int64_t> header(256);
  std::memcpy(header.data(), bytes.data(), 2048);
  header[16] = 0;
  std::memcpy(bytes.data(), header.data(), 2048);
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const unsigned char byte : bytes) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  }
  header[16] = static_cast<int64_t>(hash);
  std::memcpy(bytes.data(), header.data(), 2048);
}

TEST_F(TrainingStateTest, TrainingStateRoundTrip) {
  const TrainingState s = sample_state(1001);
  write_training_state(path("state.bin"), s);
  EXPECT_EQ(read_bytes(path("state.bin")).size(), 2048u + 2 * 4 * 1001 + 37);
  const TrainingState r = read_training_state(path("state.bin"));
  EXPECT_EQ(r.step, s.step);
  EXPECT_EQ(r.num_parameters, s.num_parameters);
  EXPECT_EQ(r.batch_size, s.batch_size);
  EXPECT_EQ(r.seq_len, s.seq_len);
  EXPECT_EQ(r.total_batch_size, s.total_batch_size);
  EXPECT_EQ(r.seed, s.seed);
  EXPECT_EQ(r.world_size, s.world_size);
  EXPECT_EQ(r.loader.epoch, 3);
  EXPECT_EQ(r.loader.shard_cursor, 5);
  EXPECT_EQ(r.loader.batch_cursor, 17);
  EXPECT_EQ(r.sample_rng, s.sample_rng);
  EXPECT_EQ(r.model_file, "model_00001234.bin");
  EXPECT_EQ(r.model_digest, s.model_digest);
  EXPECT_EQ(r.adam_m, s.adam_m);
  EXPECT_EQ(r.adam_v, s.adam_v);
  EXPECT_EQ(r.precision_state, s.precision_state);
  EXPECT_EQ(r.version, kStateVersion);
  EXPECT_EQ(r.run_id, s.run_id);
  EXPECT_EQ(r.skipped_in_a_row, 7);
  EXPECT_EQ(r.skipped_total, 9);
  ASSERT_TRUE(r.settings.has_value());
  EXPECT_TRUE(*r.settings == *s.settings);
  EXPECT_EQ(r.settings->max_lr, 6e-4f);
  EXPECT_EQ(r.settings->final_lr_frac, 0.1f);

  TrainingState empty = sample_state(0);
  empty.precision_state.clear();
  write_training_state(path("empty.bin"), empty);
  EXPECT_EQ(read_training_state(path("empty.bin")).num_parameters, 0);
  EXPECT_TRUE(read_training_state(path("empty.bin")).precision_state.empty());
}

TEST_F(TrainingStateTest, TrainingStateDetectsCorruption) {
  write_training_state(path("state.bin"), sample_state(100));
  const std::vector<unsigned char> good = read_bytes(path("state.bin"));
  auto expect_rejected = [&](const std::string& name, const std::vector<unsigned char>& bytes,
                             const std::string& problem) {
    write_bytes(path(name), bytes);
    try {
      read_training_state(path(name));
      ADD_FAILURE() << name << " loaded; expected '" << problem << "'";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path(name) + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(problem), std::string::npos) << what;
    }
  };
  // One bit in m, in v, in the precision state (the last byte), in the step, in the loader
  // position, in the recorded model hash and in the model file name: the hash covers the header
  // too.
  for (size_t offset : {size_t{2048}, size_t{2048 + 400 + 3}, good.size() - 1, size_t{2 * 8},
                        size_t{10 * 8 + 1}, size_t{18 * 8 + 7}, size_t{20 * 8 + 2}}) {
    std::vector<unsigned char> flipped = good;
    flipped[offset] ^= 0x10;
    expect_rejected("flipped.bin", flipped, "hash mismatch");
  }
  expect_rejected("truncated.bin", std::vector<unsigned char>(good.begin(), good.end() - 1),
                  "truncated");
  std::vector<unsigned char> trailing = good;
  trailing.push_back(0);
  expect_rejected("trailing.bin", trailing, "trailing bytes");
  std::vector<unsigned char> magic = good;
  magic[0] ^= 1;
  expect_rejected("magic.bin", magic, "bad magic number");
  std::vector<unsigned char> version = good;
  version[8] = 5;
  expect_rejected("version.bin", version, "unsupported training-state version 5");
  version[8] = 1;  // written before states recorded their model file
  expect_rejected("version1.bin", version, "do not record their model file's hash");
  expect_rejected("short.bin", std::vector<unsigned char>(good.begin(), good.begin() + 100),
                  "shorter than");
  // A precision state's length (slot 65) that the payload does not match, or far too long.
  for (const int64_t length : {int64_t{36}, int64_t{-1}, int64_t{1} << 40}) {
    std::vector<unsigned char> lengths = good;
    std::memcpy(lengths.data() + 65 * 8, &length, 8);
    rehash(lengths);
    expect_rejected("length.bin", lengths, "inconsistent header");
  }
  // A model file is not a training state.
  const std::vector<float> zeros(ParameterLayout::for_config(tiny_config()).total);
  write_model_checkpoint(path("model.bin"), tiny_config(), zeros.data());
  EXPECT_THROW(read_training_state(path("model.bin")), Error);
}

// An older state made from a version 4 file: the precision state cut off, its slot and the
// payload length set back, later slots cleared, the version set back and the hash computed again.
std::vector<unsigned char> older_state(std::vector<unsigned char> bytes, size_t precision_bytes,
                                       int64_t version) {
  bytes.resize(bytes.size() - precision_bytes);
  std::vector<int64_t> header(256);
  std::memcpy(header.data(), bytes.data(), 2048);
  header[1] = version;
  header[17] -= static_cast<int64_t>(precision_bytes);
  header[65] = 0;
  if (version < 3)
    for (int slot = 52; slot < 65; ++slot) header[slot] = 0;
  std::memcpy(bytes.data(), header.data(), 2048);
  rehash(bytes);
  return bytes;
}

// sample_state(10), written, made a state of an older version and read back.
TrainingState TrainingStateTest::read_as_version(int64_t version) {
  write_training_state(path("state.bin"), sample_state(10));
  write_bytes(path("old.bin"), older_state(read_bytes(path("state.bin")), 37, version));
  return read_training_state(path("old.bin"));
}

// A version 3 state (written before precision states) still reads, with none.
TEST_F(TrainingStateTest, TrainingStateVersion3ReadsWithoutAPrecisionState) {
  const TrainingState s = sample_state(10), r = read_as_version(3);
  EXPECT_EQ(r.version, 3);
  EXPECT_EQ(r.adam_v, s.adam_v);
  EXPECT_EQ(r.run_id, s.run_id);
  EXPECT_TRUE(r.settings.has_value());
  EXPECT_TRUE(r.precision_state.empty());
}

// A version 2 state (written before run ids) still reads: the fields it has, no run id, a streak
// of 0 and no settings.
TEST_F(TrainingStateTest, TrainingStateVersion2ReadsWithoutRunIdStreakOrSettings) {
  const TrainingState s = sample_state(10), r = read_as_version(2);
  EXPECT_EQ(r.version, 2);
  EXPECT_TRUE(r.precision_state.empty());
  EXPECT_EQ(r.step, s.step);
  EXPECT_EQ(r.model_file, s.model_file);
  EXPECT_EQ(r.adam_v, s.adam_v);
  EXPECT_EQ(r.run_id, 0u);
  EXPECT_EQ(r.skipped_in_a_row, 0);
  EXPECT_FALSE(r.settings.has_value());
}

// The training-state part of CheckpointTest.FailedWritesLeaveTheOldFile (model file tests).
TEST_F(TrainingStateTest, FailedWriteLeavesTheOldFile) {
  const ModelConfig config = tiny_config();
  std::vector<float> old_params(ParameterLayout::for_config(config).total);
  init_parameters(old_params.data(), config, 1);
  const std::string target = path("ckpt.bin");
  write_model_checkpoint(target, config, old_params.data());
  const std::vector<unsigned char> old_bytes = read_bytes(target);
  const std::string temp = target + ".tmp." + std::to_string(::getpid());
  if (::access("/dev/full", W_OK) == 0) {
    ASSERT_EQ(::symlink("/dev/full", temp.c_str()), 0);
    EXPECT_THROW(write_training_state(target, sample_state(50)), Error);
    EXPECT_EQ(read_bytes(target), old_bytes);
    std::filesystem::remove(temp);
  }
}

}  // namespace
}  // namespace gpt2
