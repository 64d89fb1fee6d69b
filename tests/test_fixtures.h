/**
 * @file test_fixtures.h
 * @brief What many tests build the same way: tiny model configs, random token ids, and the
 *        message of an expected gpt2::Error.
 */
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "model/config.h"

namespace gpt2::testing {

/// A ModelConfig of the given sizes (no preset: the tests' own small models).
inline ModelConfig model_config(int max_seq_len, int vocab_size, int padded_vocab_size,
                                int num_layers, int num_heads, int channels) {
  ModelConfig c;
  c.max_seq_len = max_seq_len;
  c.vocab_size = vocab_size;
  c.padded_vocab_size = padded_vocab_size;
  c.num_layers = num_layers;
  c.num_heads = num_heads;
  c.channels = channels;
  return c;
}

/// The smallest config the tests train: 2 layers of 2 heads of 4 channels, V = 37 (Vp = 40).
inline ModelConfig tiny_config() { return model_config(8, 37, 40, 2, 2, 8); }

/// n token ids uniform in [0, V), from `seed`.
inline std::vector<int> random_tokens(size_t n, int V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> tokens(n);
  for (int& t : tokens) t = static_cast<int>(rng.uniform_int(static_cast<uint64_t>(V)));
  return tokens;
}

/// A fixture whose every test works in a fresh folder of its own (mkdtemp under
/// ::testing::TempDir(), named from `prefix`), removed with everything in it at the test's end.
class ScratchDirTest : public ::testing::Test {
 protected:
  explicit ScratchDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    std::string base = ::testing::TempDir();
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    std::string templ = base + "/" + prefix_ + "_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr) << "mkdtemp failed for " << templ;
    dir_ = templ;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  /// `name` inside the folder.
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  static std::vector<unsigned char> read_bytes(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return std::vector<unsigned char>(std::istreambuf_iterator<char>(in),
                                      std::istreambuf_iterator<char>());
  }
  static void write_bytes(const std::string& file, const std::vector<unsigned char>& bytes) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << file;
  }

  std::string dir_;

 private:
  std::string prefix_;
};

/// The message of the gpt2::Error body() throws; a test failure (and "") when it throws none.
template <typename Body>
std::string error_message(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a gpt2::Error";
  return "";
}

}  // namespace gpt2::testing
