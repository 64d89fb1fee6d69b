/**
 * @file init_test.cpp
 * @brief Tests for init_parameters (model/parameters.h): GPT-2 statistics and determinism.
 *
 * A small config (V=1000 padded to 1024, C=128, L=4) gives 10^4..10^6 draws per tensor, so
 * the sample standard deviation of a normal(0, s) tensor lies within 3% of s with margin
 * (its relative standard error is 1/sqrt(2n) < 0.3%) and the mean within 0.05 s. Residual
 * projections use s = 0.02/sqrt(2L) = 0.02/sqrt(8). Exact values: LayerNorm weights 1,
 * biases 0, padding rows [V, Vp) of wte 0. Each tensor has its own random stream, so changing
 * maxT changes wpe's length only: wte is bitwise identical and wpe's common rows too.
 */
#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "model/config.h"
#include "model/parameters.h"

namespace gpt2 {
namespace {

ModelConfig small_config(int max_seq_len) {
  ModelConfig c;
  c.max_seq_len = max_seq_len;
  c.vocab_size = 1000;
  c.padded_vocab_size = 1024;
  c.num_layers = 4;
  c.num_heads = 4;
  c.channels = 128;
  return c;
}

std::vector<float> initialized(const ModelConfig& config, uint64_t seed) {
  std::vector<float> params(ParameterLayout::for_config(config).total);
  init_parameters(params.data(), config, seed);
  return params;
}

struct Moments {
  double mean = 0, stddev = 0;
};

Moments moments(const float* p, size_t n) {
  double sum = 0, sum_sq = 0;
  for (size_t i = 0; i < n; ++i) sum += p[i];
  const double mean = sum / n;
  for (size_t i = 0; i < n; ++i) sum_sq += (p[i] - mean) * (p[i] - mean);
  return {mean, std::sqrt(sum_sq / n)};
}

TEST(InitParameters, Gpt2Statistics) {
  const ModelConfig config = small_config(256);
  const ParameterLayout layout = ParameterLayout::for_config(config);
  const std::vector<float> params = initialized(config, 1337);
  const double residual_std = 0.02 / std::sqrt(2.0 * config.num_layers);
  const size_t real_wte = size_t(config.vocab_size) * config.channels;

  for (int t = 0; t < kNumParamTensors; ++t) {
    SCOPED_TRACE(ParameterLayout::name(t));
    const float* p = params.data() + layout.offsets[t];
    size_t n = layout.sizes[t];
    switch (t) {
      case kLn1w: case kLn2w: case kLnfw:
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(p[i], 1.0f) << i;
        break;
      case kLn1b: case kQkvb: case kAttprojb: case kLn2b: case kFcb: case kFcprojb: case kLnfb:
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(p[i], 0.0f) << i;
        break;
      default: {
        if (t == kWte) {
          for (size_t i = real_wte; i < n; ++i) ASSERT_EQ(p[i], 0.0f) << "padding row element " << i;
          n = real_wte;
        }
        const double expected = (t == kAttprojw || t == kFcprojw) ? residual_std : 0.02;
        const Moments m = moments(p, n);
        EXPECT_NEAR(m.stddev, expected, 0.03 * expected);
        EXPECT_NEAR(m.mean, 0.0, 0.05 * expected);
      }
    }
  }
}

TEST(InitParameters, DeterministicBySeed) {
  const ModelConfig config = small_config(64);
  const std::vector<float> a = initialized(config, 42);
  const std::vector<float> b = initialized(config, 42);
  const std::vector<float> c = initialized(config, 43);
  EXPECT_EQ(a, b);
  const ParameterLayout layout = ParameterLayout::for_config(config);
  for (int t : {kWte, kWpe, kQkvw, kAttprojw, kFcw, kFcprojw}) {
    size_t differing = 0;
    for (size_t i = 0; i < layout.sizes[t]; ++i)
      differing += a[layout.offsets[t] + i] != c[layout.offsets[t] + i];
    // Only the zero padding of wte can agree; every random element should differ.
    const size_t random = t == kWte ? size_t(config.vocab_size) * config.channels : layout.sizes[t];
    EXPECT_GT(differing, random * 99 / 100) << ParameterLayout::name(t);
  }
}

TEST(InitParameters, TensorsIndependentOfMaxSeqLen) {
  const ModelConfig short_config = small_config(64);
  const ModelConfig long_config = small_config(512);
  const std::vector<float> a = initialized(short_config, 7);
  const std::vector<float> b = initialized(long_config, 7);
  const ParameterLayout la = ParameterLayout::for_config(short_config);
  const ParameterLayout lb = ParameterLayout::for_config(long_config);
  for (int t = 0; t < kNumParamTensors; ++t) {
    SCOPED_TRACE(ParameterLayout::name(t));
    const size_t common = std::min(la.sizes[t], lb.sizes[t]);  // wpe: the first 64 rows
    for (size_t i = 0; i < common; ++i)
      ASSERT_EQ(a[la.offsets[t] + i], b[lb.offsets[t] + i]) << i;
  }
}

}  // namespace
}  // namespace gpt2
