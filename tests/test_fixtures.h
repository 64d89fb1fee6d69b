/**
 * @file test_fixtures.h
 * @brief What many tests build the same way: tiny model configs, random token ids, and the
 *        message of an expected gpt2::Error.
 */
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
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
