/**
 * @file checkpoint_test.cpp
 * @brief Tests for model/checkpoint.h: llm.c model files (the training-state file that pairs
 *        with them: tests/train/training_state_test.cpp).
 *
 * Round trips: fp32 is bit-exact (random bit patterns, NaN payloads included); bf16 equals a
 * reference rounding written here independently (nearest of the two neighbouring bf16 values
 * by distance in double, ties to the even mantissa, overflow to infinity as IEEE rounding
 * does, NaN stays NaN). Compatibility: a file assembled byte by byte the way llm.c writes it
 * (little-endian int32 header, then raw parameters) loads. Every malformed file is rejected
 * with a message naming the file and the problem. Atomicity is checked through its
 * observable contract: a write that fails (temporary file cannot be created, the disk fills
 * up mid-write via /dev/full, the folder is missing) throws and leaves the old file intact.
 * Each test runs in its own mkdtemp folder, removed afterwards.
 */
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "base/rng.h"
#include "model/checkpoint.h"
#include "model/parameters.h"
#include "test_fixtures.h"

namespace gpt2 {
namespace {

using testing::tiny_config;

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// Nearest bf16 to x, derived from distances rather than bit tricks.
float reference_bf16(float x) {
  if (std::isnan(x)) return std::numeric_limits<float>::quiet_NaN();
  const uint32_t bits = bits_of(x);
  const uint32_t toward_zero = bits & 0xFFFF0000u;
  if (toward_zero == bits) return x;  // already a bf16 value (incl. +-0 and +-inf)
  const uint32_t away = toward_zero + 0x10000u;  // next bf16 magnitude, possibly infinity
  const double lo = float_of(toward_zero);
  // Rounding treats the exponent range as unbounded: "infinity" sits at 2^128 for distances.
  const double hi = (away & 0x7F800000u) == 0x7F800000u ? std::copysign(std::ldexp(1.0, 128), x)
                                                        : double(float_of(away));
  const double d_lo = std::fabs(double(x) - lo), d_hi = std::fabs(hi - double(x));
  if (d_lo < d_hi) return float_of(toward_zero);
  if (d_hi < d_lo) return float_of(away);
  return ((toward_zero >> 16) & 1u) ? float_of(away) : float_of(toward_zero);
}

bool same_value(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || bits_of(a) == bits_of(b);
}

class CheckpointTest : public testing::ScratchDirTest {
 protected:
  CheckpointTest() : ScratchDirTest("gpt2_checkpoint") {}

  // Expects read_model_checkpoint to throw gpt2::Error whose message has the path and `problem`.
  void expect_model_rejected(const std::string& file, const std::string& problem) {
    try {
      read_model_checkpoint(file);
      ADD_FAILURE() << file << " loaded; expected an error containing '" << problem << "'";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(file + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(problem), std::string::npos) << what;
    }
  }
};

void put_le32(std::vector<unsigned char>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

// A model file as llm.c writes it: 256 int32 (little-endian), then the parameters.
std::vector<unsigned char> llmc_file(const ModelConfig& c, int32_t version,
                                     const std::vector<uint32_t>& param_bits) {
  std::vector<unsigned char> bytes;
  const int32_t header[8] = {20240326,      version,    c.max_seq_len, c.vocab_size,
                             c.num_layers, c.num_heads, c.channels,    c.padded_vocab_size};
  for (int i = 0; i < 256; ++i) put_le32(bytes, i < 8 ? static_cast<uint32_t>(header[i]) : 0u);
  for (uint32_t b : param_bits) {
    if (version == 3) {
      put_le32(bytes, b);
    } else {
      bytes.push_back(static_cast<unsigned char>(b & 0xFF));
      bytes.push_back(static_cast<unsigned char>((b >> 8) & 0xFF));
    }
  }
  return bytes;
}

TEST_F(CheckpointTest, Fp32RoundTripIsBitExact) {
  const ModelConfig config = tiny_config();
  const size_t total = ParameterLayout::for_config(config).total;
  std::vector<float> params(total);
  Rng rng(11);
  for (size_t i = 0; i < total; ++i) params[i] = float_of(static_cast<uint32_t>(rng.next_u64()));
  params[0] = float_of(0x7FC00001u);  // NaN payloads survive fp32 untouched
  params[1] = -0.0f;
  write_model_checkpoint(path("m.bin"), config, params.data());

  const std::vector<unsigned char> bytes = read_bytes(path("m.bin"));
  ASSERT_EQ(bytes.size(), 1024 + 4 * total);
  EXPECT_EQ(bytes[0] | bytes[1] << 8 | bytes[2] << 16 | bytes[3] << 24, 20240326);
  EXPECT_EQ(bytes[4], 3);

  const ModelCheckpoint loaded = read_model_checkpoint(path("m.bin"));
  EXPECT_EQ(loaded.config, config);
  ASSERT_EQ(loaded.params.size(), total);
  EXPECT_EQ(std::memcmp(loaded.params.data(), params.data(), total * sizeof(float)), 0);
  EXPECT_EQ(read_model_checkpoint_config(path("m.bin")), config);
}

TEST_F(CheckpointTest, Bf16RoundTripRoundsToNearestEven) {
  const ModelConfig config = tiny_config();
  const size_t total = ParameterLayout::for_config(config).total;
  std::vector<float> params(total);
  const uint32_t specials[] = {
      0x3F808000u,  // 1 + 2^-8: a tie, lower neighbour even -> down
      0x3F818000u,  // a tie, lower neighbour odd -> up
      0x3F808001u,  // just above a tie -> up
      0x3F807FFFu,  // just below a tie -> down
      0x7F7FFFFFu,  // FLT_MAX rounds to infinity
      0x7F7F7FFFu,  // stays the largest finite bf16
      0x00008000u,  // subnormal tie
      0x00018000u,  // subnormal tie, odd lower neighbour
      0x80000000u,  // -0
      0x7F800000u, 0xFF800000u,  // +-inf
      0x7F800001u,  // NaN whose payload is only in the low bits: must not become inf
      0xFF800001u, 0x7FC00000u,
  };
  size_t next = 0;
  for (uint32_t s : specials) params[next++] = float_of(s);
  Rng rng(5);
  for (; next < total; ++next) {
    // Half arbitrary bit patterns (every exponent), half typical weights.
    params[next] = next % 2 ? float_of(static_cast<uint32_t>(rng.next_u64()))
                            : static_cast<float>(0.02 * rng.normal());
  }
  write_model_checkpoint(path("m16.bin"), config, params.data(), kModelVersionBf16);
  EXPECT_EQ(read_bytes(path("m16.bin")).size(), 1024 + 2 * total);

  const ModelCheckpoint loaded = read_model_checkpoint(path("m16.bin"));
  EXPECT_EQ(loaded.config, config);
  ASSERT_EQ(loaded.params.size(), total);
  for (size_t i = 0; i < total; ++i) {
    const float expected = reference_bf16(params[i]);
    ASSERT_TRUE(same_value(loaded.params[i], expected))
        << "element " << i << ": input bits 0x" << std::hex << bits_of(params[i]) << " read 0x"
        << bits_of(loaded.params[i]) << " expected 0x" << bits_of(expected);
  }
  EXPECT_EQ(bits_of(loaded.params[0]), 0x3F800000u);
  EXPECT_EQ(bits_of(loaded.params[1]), 0x3F820000u);
  EXPECT_TRUE(std::isinf(loaded.params[4]));
  EXPECT_TRUE(std::isnan(loaded.params[11]));
}

TEST_F(CheckpointTest, LoadsAFileWrittenAsLlmcDoes) {
  const ModelConfig config = tiny_config();
  const size_t total = ParameterLayout::for_config(config).total;
  std::vector<uint32_t> bits(total);
  std::vector<float> values(total);
  init_parameters(values.data(), config, 3);
  for (size_t i = 0; i < total; ++i) bits[i] = bits_of(values[i]);
  write_bytes(path("llmc.bin"), llmc_file(config, 3, bits));
  const ModelCheckpoint fp32 = read_model_checkpoint(path("llmc.bin"));
  EXPECT_EQ(fp32.config, config);
  for (size_t i = 0; i < total; ++i) ASSERT_EQ(bits_of(fp32.params[i]), bits[i]) << i;

  // llm.c's bf16 files hold the upper 16 bits; reading widens them with zero low bits.
  std::vector<uint32_t> bf16_bits(total);
  for (size_t i = 0; i < total; ++i) bf16_bits[i] = bits[i] >> 16;
  write_bytes(path("llmc16.bin"), llmc_file(config, 5, bf16_bits));
  const ModelCheckpoint bf16 = read_model_checkpoint(path("llmc16.bin"));
  EXPECT_EQ(bf16.config, config);
  for (size_t i = 0; i < total; ++i) ASSERT_EQ(bits_of(bf16.params[i]), bf16_bits[i] << 16) << i;
}

TEST_F(CheckpointTest, RejectsMalformedModelFiles) {
  const ModelConfig config = tiny_config();
  const size_t total = ParameterLayout::for_config(config).total;
  const std::vector<uint32_t> zeros(total, 0u);
  const std::vector<unsigned char> good = llmc_file(config, 3, zeros);

  std::vector<unsigned char> bytes(good.begin(), good.end() - 4);
  write_bytes(path("truncated.bin"), bytes);
  expect_model_rejected(path("truncated.bin"), "truncated");

  bytes = good;
  bytes.push_back(0);
  bytes.push_back(0);
  write_bytes(path("trailing.bin"), bytes);
  expect_model_rejected(path("trailing.bin"), "trailing bytes");

  write_bytes(path("short.bin"), std::vector<unsigned char>(100, 0));
  expect_model_rejected(path("short.bin"), "shorter than the 1024-byte llm.c model header");

  bytes = good;
  bytes[0] ^= 1;
  write_bytes(path("magic.bin"), bytes);
  expect_model_rejected(path("magic.bin"), "bad magic number");

  bytes = good;
  bytes[4] = 4;
  write_bytes(path("version.bin"), bytes);
  expect_model_rejected(path("version.bin"), "unsupported model file version 4");

  ModelConfig odd = config;
  odd.num_heads = 3;  // C = 8 is not a multiple of 3
  write_bytes(path("heads.bin"), llmc_file(odd, 3, zeros));
  expect_model_rejected(path("heads.bin"), "inconsistent header");
  expect_model_rejected(path("heads.bin"), "multiple of NH");

  ModelConfig small_vp = config;
  small_vp.padded_vocab_size = 30;  // < V = 37
  write_bytes(path("vp.bin"), llmc_file(small_vp, 3, zeros));
  expect_model_rejected(path("vp.bin"), "inconsistent header");

  ModelConfig huge = config;
  huge.channels = 1 << 30;
  huge.num_heads = 1;
  write_bytes(path("huge.bin"), llmc_file(huge, 3, zeros));
  expect_model_rejected(path("huge.bin"), "inconsistent header");

  // A valid fp32 file relabelled as bf16 is twice too long.
  bytes = good;
  bytes[4] = 5;
  write_bytes(path("relabelled.bin"), bytes);
  expect_model_rejected(path("relabelled.bin"), "trailing bytes");

  expect_model_rejected(path("missing.bin"), "no such file");
  EXPECT_THROW(read_model_checkpoint_config(path("magic.bin")), Error);
}

TEST_F(CheckpointTest, ModelFileDigestIsTheHashOfTheBytesWrittenAndRead) {
  const ModelConfig config = tiny_config();
  std::vector<float> params(ParameterLayout::for_config(config).total);
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.001f * static_cast<float>(i % 997);
  for (const int32_t version : {kModelVersionFp32, kModelVersionBf16}) {
    const ModelFileDigest written =
        write_model_checkpoint(path("m.bin"), config, params.data(), version);
    std::vector<unsigned char> bytes = read_bytes(path("m.bin"));
    EXPECT_EQ(written.bytes, bytes.size());
    // FNV-1a 64 of the file's bytes, computed here independently.
    uint64_t hash = 0xcbf29ce484222325ull;
    for (const unsigned char b : bytes) hash = (hash ^ b) * 0x100000001b3ull;
    EXPECT_EQ(written.hash, hash) << version;
    EXPECT_EQ(read_model_checkpoint(path("m.bin")).digest, written) << version;
    // One flipped bit in the parameters changes the digest of what is read back.
    bytes[bytes.size() / 2] ^= 0x01;
    write_bytes(path("m.bin"), bytes);
    EXPECT_NE(read_model_checkpoint(path("m.bin")).digest, written) << version;
  }
}

TEST_F(CheckpointTest, FailedWritesLeaveTheOldFile) {
  const ModelConfig config = tiny_config();
  const size_t total = ParameterLayout::for_config(config).total;
  std::vector<float> old_params(total), new_params(total);
  init_parameters(old_params.data(), config, 1);
  init_parameters(new_params.data(), config, 2);
  const std::string target = path("ckpt.bin");
  write_model_checkpoint(target, config, old_params.data());
  const std::vector<unsigned char> old_bytes = read_bytes(target);
  // file_io.h documents the temporary name "<path>.tmp.<pid>"; occupying it makes the write
  // fail without needing a read-only folder (which root ignores).
  const std::string temp = target + ".tmp." + std::to_string(::getpid());

  // 1. The temporary file cannot be created.
  ASSERT_EQ(::mkdir(temp.c_str(), 0700), 0);
  EXPECT_THROW(write_model_checkpoint(target, config, new_params.data()), Error);
  EXPECT_EQ(read_bytes(target), old_bytes);
  ASSERT_EQ(::rmdir(temp.c_str()), 0);

  // 2. The disk fills up in the middle of the write.
  if (::access("/dev/full", W_OK) == 0) {
    // The failed writer unlinks its temporary name, so the trap is set before each write.
    ASSERT_EQ(::symlink("/dev/full", temp.c_str()), 0);
    EXPECT_THROW(write_model_checkpoint(target, config, new_params.data(), kModelVersionBf16),
                 Error);
    EXPECT_EQ(read_bytes(target), old_bytes);
    std::filesystem::remove(temp);
  }

  // 3. The folder does not exist: nothing is created.
  const std::string nowhere = path("missing/ckpt.bin");
  EXPECT_THROW(write_model_checkpoint(nowhere, config, new_params.data()), Error);
  EXPECT_FALSE(std::filesystem::exists(path("missing")));

  // And a successful write replaces the file completely.
  write_model_checkpoint(target, config, new_params.data());
  EXPECT_EQ(read_model_checkpoint(target).params, new_params);
  size_t entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    ++entries;
    EXPECT_EQ(entry.path().filename(), "ckpt.bin") << "left behind: " << entry.path();
  }
  EXPECT_EQ(entries, 1u);
}

}  // namespace
}  // namespace gpt2
