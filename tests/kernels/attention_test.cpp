// Tests of kernels/cpu/attention (naive and flash): gradients of the whole qkv against finite
// differences (double); the naive probabilities (rows sum to 1, masked entries exactly 0);
// flash against naive and against a plain double-precision attention, forward (out, lse) and
// backward (dqkv), for block sizes that do not divide T; thread-count independence; and the
// decode pair (key/value cache write, one query over the cache) against the full forwards.
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <ostream>
#include <vector>

#include "tests/kernels/kernel_test_utils.h"

namespace gpt2::cpu {
namespace {

using test::all_close;
using test::numeric_gradient;
using test::random_normal;

std::string describe(int B, int T, int NH, int HS, FlashBlocks blocks) {
  return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
         " HS=" + std::to_string(HS) + " blocks " + std::to_string(blocks.block_q) + "x" +
         std::to_string(blocks.block_k);
}

// Causal attention written out in double: out (B,T,C) and lse (B,NH,T), from the formula only.
void reference_attention(const std::vector<float>& qkv, int B, int T, int C, int NH,
                         std::vector<double>& out, std::vector<double>& lse) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  out.assign(static_cast<size_t>(B) * T * C, 0.0);
  lse.assign(static_cast<size_t>(B) * NH * T, 0.0);
  std::vector<double> s(T);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        double max_s = -std::numeric_limits<double>::infinity();
        for (int t2 = 0; t2 <= t; ++t2) {
          double dot = 0.0;
          for (int i = 0; i < HS; ++i)
            dot += double(qkv[(b * T + t) * 3 * C + h * HS + i]) *
                   qkv[(b * T + t2) * 3 * C + C + h * HS + i];
          s[t2] = dot * scale;
          max_s = std::max(max_s, s[t2]);
        }
        double sum = 0.0;
        for (int t2 = 0; t2 <= t; ++t2) sum += std::exp(s[t2] - max_s);
        lse[(b * NH + h) * T + t] = max_s + std::log(sum);
        for (int t2 = 0; t2 <= t; ++t2) {
          const double p = std::exp(s[t2] - max_s) / sum;
          for (int i = 0; i < HS; ++i)
            out[(b * T + t) * C + h * HS + i] += p * qkv[(b * T + t2) * 3 * C + 2 * C + h * HS + i];
        }
      }
    }
  }
}

struct GradientCase {
  int B, T, NH, HS;
  FlashBlocks blocks;
};

void PrintTo(const GradientCase& c, std::ostream* os) {
  *os << describe(c.B, c.T, c.NH, c.HS, c.blocks);
}

class AttentionGradient : public ::testing::TestWithParam<GradientCase> {};

TEST_P(AttentionGradient, NaiveAndFlashMatchFiniteDifferencesInDouble) {
  const GradientCase p = GetParam();
  const int B = p.B, T = p.T, NH = p.NH, C = p.NH * p.HS;
  SCOPED_TRACE(describe(B, T, NH, p.HS, p.blocks));
  std::vector<double> qkv = random_normal<double>(B * T * 3 * C, 1);
  const auto dout = random_normal<double>(B * T * C, 2);
  std::vector<double> out(B * T * C), probs(B * NH * T * T), lse(B * NH * T);
  auto naive_objective = [&] {
    attention_naive_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH);
    return test::weighted_sum(out, dout);
  };
  auto flash_objective = [&] {
    attention_flash_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, p.blocks);
    return test::weighted_sum(out, dout);
  };
  naive_objective();
  const std::vector<double> naive_out = out;
  std::vector<double> dqkv = test::poisoned<double>(qkv.size());  // overwritten in full
  attention_naive_backward(dqkv.data(), dout.data(), qkv.data(), probs.data(), B, T, C, NH);
  EXPECT_TRUE(all_close(dqkv, numeric_gradient(qkv, naive_objective), 1e-6, 1e-7, "naive dqkv"));

  flash_objective();
  EXPECT_TRUE(all_close(out, naive_out, 1e-13, 1e-14, "flash out vs naive out"));
  dqkv = test::poisoned<double>(qkv.size());
  attention_flash_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C,
                           NH, p.blocks);
  EXPECT_TRUE(all_close(dqkv, numeric_gradient(qkv, flash_objective), 1e-6, 1e-7, "flash dqkv"));
}

INSTANTIATE_TEST_SUITE_P(OddShapes, AttentionGradient,
                         ::testing::Values(GradientCase{1, 1, 1, 3, {4, 4}},
                                           GradientCase{2, 3, 2, 3, {2, 2}},
                                           GradientCase{2, 17, 3, 4, {4, 3}},
                                           GradientCase{1, 17, 2, 5, {64, 64}}));

TEST(AttentionNaive, ProbabilityRowsSumToOneAndMaskedEntriesAreZero) {
  constexpr int B = 2, T = 17, NH = 3, HS = 8, C = NH * HS;
  const auto qkv = random_normal<float>(B * T * 3 * C, 11, 2.0);
  auto out = test::poisoned<float>(B * T * C);
  auto probs = test::poisoned<float>(B * NH * T * T);
  attention_naive_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH);
  for (int bh = 0; bh < B * NH; ++bh) {
    for (int t = 0; t < T; ++t) {
      const float* row = probs.data() + (bh * T + t) * T;
      double sum = 0.0;
      for (int t2 = 0; t2 <= t; ++t2) {
        ASSERT_GE(row[t2], 0.0f) << "bh " << bh << " t " << t << " t2 " << t2;
        sum += row[t2];
      }
      // T terms each rounded to float: within T half-ulps of 1.
      EXPECT_NEAR(sum, 1.0, T * std::ldexp(1.0, -24)) << "bh " << bh << " t " << t;
      for (int t2 = t + 1; t2 < T; ++t2)
        ASSERT_EQ(row[t2], 0.0f) << "masked entry bh " << bh << " t " << t << " t2 " << t2;
    }
  }
}

struct FlashCase {
  int T;
  FlashBlocks blocks;
};

void PrintTo(const FlashCase& c, std::ostream* os) {
  *os << "T=" << c.T << " blocks " << c.blocks.block_q << "x" << c.blocks.block_k;
}

class FlashVsNaive : public ::testing::TestWithParam<FlashCase> {};

// The float kernels against each other and against the double formula. Tolerances: 1e-5
// relative, with an absolute floor of 1e-5 times the tensor's largest magnitude for elements
// that are sums cancelling to near zero.
TEST_P(FlashVsNaive, ForwardAndBackwardAgreeInFloat) {
  constexpr int B = 2, NH = 3, HS = 8, C = NH * HS;
  const int T = GetParam().T;
  const FlashBlocks blocks = GetParam().blocks;
  SCOPED_TRACE(describe(B, T, NH, HS, blocks));
  const auto qkv = random_normal<float>(B * T * 3 * C, 21, 1.5);
  const auto dout = random_normal<float>(B * T * C, 22);
  auto floor_of = [](const auto& v) {
    double m = 0.0;
    for (const auto x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
    return 1e-5 * m;
  };

  auto naive_out = test::poisoned<float>(B * T * C);
  auto probs = test::poisoned<float>(B * NH * T * T);
  attention_naive_forward(naive_out.data(), probs.data(), qkv.data(), B, T, C, NH);
  auto flash_out = test::poisoned<float>(B * T * C);
  auto lse = test::poisoned<float>(B * NH * T);
  attention_flash_forward(flash_out.data(), lse.data(), qkv.data(), B, T, C, NH, blocks);

  std::vector<double> ref_out, ref_lse;
  reference_attention(qkv, B, T, C, NH, ref_out, ref_lse);
  const double out_floor = floor_of(ref_out);
  EXPECT_TRUE(all_close(flash_out, naive_out, 1e-5, out_floor, "flash out vs naive out"));
  EXPECT_TRUE(all_close(flash_out, ref_out, 1e-5, out_floor, "flash out vs double attention"));
  EXPECT_TRUE(all_close(lse, ref_lse, 1e-6, 1e-6, "flash lse vs log-sum-exp of the scores"));
  // FlashAttention's rule: the kernel's error against the exact result is at most twice
  // that of the plain same-precision implementation (plus a rounding-level allowance).
  double flash_err = 0.0, naive_err = 0.0;
  for (size_t i = 0; i < ref_out.size(); ++i) {
    flash_err = std::max(flash_err, std::fabs(flash_out[i] - ref_out[i]));
    naive_err = std::max(naive_err, std::fabs(naive_out[i] - ref_out[i]));
  }
  EXPECT_LE(flash_err, 2 * naive_err + 1e-7) << "flash " << flash_err << " naive " << naive_err;

  auto naive_dqkv = test::poisoned<float>(qkv.size());
  attention_naive_backward(naive_dqkv.data(), dout.data(), qkv.data(), probs.data(), B, T, C, NH);
  auto flash_dqkv = test::poisoned<float>(qkv.size());
  attention_flash_backward(flash_dqkv.data(), dout.data(), qkv.data(), flash_out.data(),
                           lse.data(), B, T, C, NH, blocks);
  EXPECT_TRUE(all_close(flash_dqkv, naive_dqkv, 1e-5, floor_of(naive_dqkv),
                        "flash dqkv vs naive dqkv"));
}

INSTANTIATE_TEST_SUITE_P(
    OddSizesAndBlocks, FlashVsNaive,
    ::testing::Values(FlashCase{1, {16, 16}}, FlashCase{1, {7, 13}}, FlashCase{17, {16, 16}},
                      FlashCase{17, {32, 8}}, FlashCase{17, {7, 13}}, FlashCase{97, {16, 16}},
                      FlashCase{97, {32, 8}}, FlashCase{97, {7, 13}}, FlashCase{97, {64, 64}},
                      FlashCase{130, {16, 16}}, FlashCase{130, {32, 8}}, FlashCase{130, {7, 13}},
                      FlashCase{130, {64, 64}}, FlashCase{130, {1, 1}},
                      FlashCase{130, {200, 200}}));

TEST(Attention, BitIdenticalForAnyThreadCount) {
  constexpr int B = 2, T = 130, NH = 3, HS = 8, C = NH * HS;  // above the parallel threshold
  const FlashBlocks blocks{32, 16};
  const auto qkv = random_normal<float>(B * T * 3 * C, 31);
  const auto dout = random_normal<float>(B * T * C, 32);
  std::vector<std::vector<float>> results[2];
  for (int run = 0; run < 2; ++run) {
    test::ScopedThreadCount threads(test::kThreadCountsToCompare[run]);
    std::vector<float> naive_out(B * T * C), probs(B * NH * T * T), naive_dqkv(qkv.size());
    std::vector<float> flash_out(B * T * C), lse(B * NH * T), flash_dqkv(qkv.size());
    attention_naive_forward(naive_out.data(), probs.data(), qkv.data(), B, T, C, NH);
    attention_naive_backward(naive_dqkv.data(), dout.data(), qkv.data(), probs.data(), B, T, C,
                             NH);
    attention_flash_forward(flash_out.data(), lse.data(), qkv.data(), B, T, C, NH, blocks);
    attention_flash_backward(flash_dqkv.data(), dout.data(), qkv.data(), flash_out.data(),
                             lse.data(), B, T, C, NH, blocks);
    results[run] = {naive_out, probs, naive_dqkv, flash_out, lse, flash_dqkv};
  }
  const char* names[] = {"naive out", "probs", "naive dqkv", "flash out", "lse", "flash dqkv"};
  for (int i = 0; i < 6; ++i)
    EXPECT_TRUE(test::bit_identical(results[0][i], results[1][i], names[i]));
}

// Decode: fill a cache of capacity > T from a (B,T,3C) qkv in pieces (a "prompt" of 10
// positions, then one at a time), attend each position's query to the cache up to it, and
// compare with the full forwards' rows: the naive row bit for bit, flash and the double
// formula within 1e-5. Cache positions past T stay untouched (NaN sentinels), and out is
// written in full (NaN-poisoned before each call).
TEST(AttentionDecode, CachedRowsEqualTheFullForwardRows) {
  for (int T : {1, 11, 37}) {
    constexpr int B = 2, NH = 3, HS = 5, C = NH * HS, kCapacity = 40;
    SCOPED_TRACE("T=" + std::to_string(T));
    const auto qkv = random_normal<float>(B * T * 3 * C, 41 + T, 1.5);
    auto naive_out = test::poisoned<float>(B * T * C);
    auto probs = test::poisoned<float>(B * NH * T * T);
    attention_naive_forward(naive_out.data(), probs.data(), qkv.data(), B, T, C, NH);
    auto flash_out = test::poisoned<float>(B * T * C);
    auto lse = test::poisoned<float>(B * NH * T);
    attention_flash_forward(flash_out.data(), lse.data(), qkv.data(), B, T, C, NH, {8, 8});
    std::vector<double> ref_out, ref_lse;
    reference_attention(qkv, B, T, C, NH, ref_out, ref_lse);

    auto k_cache = test::poisoned<float>(B * NH * kCapacity * HS);
    auto v_cache = test::poisoned<float>(B * NH * kCapacity * HS);
    // The first positions in one write of their (B, prompt, 3C) rows, the rest one by one.
    const int prompt = std::min(T, 10);
    std::vector<float> prompt_rows(size_t(B) * prompt * 3 * C);
    for (int b = 0; b < B; ++b)
      std::copy(qkv.begin() + size_t(b) * T * 3 * C,
                qkv.begin() + (size_t(b) * T + prompt) * 3 * C,
                prompt_rows.begin() + size_t(b) * prompt * 3 * C);
    attention_kv_cache_write(k_cache.data(), v_cache.data(), prompt_rows.data(), B, prompt, C,
                             NH, 0, kCapacity);
    std::vector<float> decoded(B * T * C), q(B * 3 * C);
    for (int t = 0; t < T; ++t) {
      for (int b = 0; b < B; ++b)
        std::copy(qkv.begin() + (size_t(b) * T + t) * 3 * C,
                  qkv.begin() + (size_t(b) * T + t + 1) * 3 * C, q.begin() + size_t(b) * 3 * C);
      if (t >= prompt)
        attention_kv_cache_write(k_cache.data(), v_cache.data(), q.data(), B, 1, C, NH, t,
                                 kCapacity);
      auto out = test::poisoned<float>(B * C);
      attention_decode_forward(out.data(), q.data(), k_cache.data(), v_cache.data(), B, C, NH,
                               t + 1, kCapacity);
      for (int b = 0; b < B; ++b)
        std::copy(out.begin() + size_t(b) * C, out.begin() + size_t(b + 1) * C,
                  decoded.begin() + (size_t(b) * T + t) * C);
    }
    EXPECT_TRUE(test::bit_identical(decoded, naive_out, "decoded rows vs naive forward"));
    EXPECT_TRUE(all_close(decoded, flash_out, 1e-5, 1e-5, "decoded rows vs flash forward"));
    EXPECT_TRUE(all_close(decoded, ref_out, 1e-5, 1e-5, "decoded rows vs double attention"));
    for (int bh = 0; bh < B * NH; ++bh)
      for (size_t i = (size_t(bh) * kCapacity + T) * HS; i < size_t(bh + 1) * kCapacity * HS; ++i)
        ASSERT_TRUE(std::isnan(k_cache[i]) && std::isnan(v_cache[i])) << "cache overrun at " << i;
  }
}

}  // namespace
}  // namespace gpt2::cpu
