// Tests of attention_positions_forward / _backward (kernels/cpu/attention.h), the CPU reference
// of context parallelism: over every position it is the causal flash attention (out, lse, dq,
// dk, dv); a sequence's positions dealt to N ranks in 2N chunks (each rank its queries, every
// rank the whole keys and values) give the full attention's rows, and the ranks' key and value
// gradients add up to the full ones; the gradients match finite differences in double.
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "tests/kernels/kernel_test_utils.h"

namespace gpt2::cpu {
namespace {

using test::all_close;
using test::random_normal;

// qkv (B,T,3C) -> kv (B,T,2C): each position's keys, then its values.
template <typename Real>
std::vector<Real> keys_and_values(const std::vector<Real>& qkv, int B, int T, int C) {
  std::vector<Real> kv(static_cast<size_t>(B) * T * 2 * C);
  for (size_t row = 0; row < static_cast<size_t>(B) * T; ++row)
    std::copy(qkv.begin() + row * 3 * C + C, qkv.begin() + (row + 1) * 3 * C,
              kv.begin() + row * 2 * C);
  return kv;
}

// Positions of `rank` of N: chunks rank and 2N-1-rank of 2N near-equal chunks of [0, T).
std::vector<int> rank_positions(int T, int N, int rank) {
  std::vector<int> positions;
  for (const int chunk : {rank, 2 * N - 1 - rank}) {
    const int begin = chunk * T / (2 * N), end = (chunk + 1) * T / (2 * N);
    for (int p = begin; p < end; ++p) positions.push_back(p);
  }
  return positions;
}

// Rows `positions` of x (B,T,width) -> (B,positions.size(),width).
template <typename Real>
std::vector<Real> rows(const std::vector<Real>& x, int B, int T, int width,
                       const std::vector<int>& positions) {
  const size_t Tq = positions.size(), w = static_cast<size_t>(width);
  std::vector<Real> out(B * Tq * w);
  for (size_t b = 0; b < static_cast<size_t>(B); ++b)
    for (size_t i = 0; i < Tq; ++i)
      std::copy(x.begin() + (b * T + positions[i]) * w, x.begin() + (b * T + positions[i] + 1) * w,
                out.begin() + (b * Tq + i) * w);
  return out;
}

struct Shape {
  int B, T, NH, HS;
};

class AttentionPositions : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionPositions, EveryPositionIsTheCausalFlashAttention) {
  const Shape s = GetParam();
  const int C = s.NH * s.HS, B = s.B, T = s.T;
  const std::vector<float> qkv = random_normal<float>(size_t(B) * T * 3 * C, 11);
  const std::vector<float> dout = random_normal<float>(size_t(B) * T * C, 12);
  std::vector<float> out(size_t(B) * T * C), lse(size_t(B) * s.NH * T);
  attention_flash_forward(out.data(), lse.data(), qkv.data(), B, T, C, s.NH, FlashBlocks{4, 3});
  std::vector<float> dqkv(qkv.size());
  attention_flash_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C,
                           s.NH, FlashBlocks{4, 3});

  std::vector<int> all(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) all[t] = t;
  const std::vector<float> kv = keys_and_values(qkv, B, T, C);
  std::vector<float> got_out(out.size()), got_lse(lse.size());
  attention_positions_forward(got_out.data(), got_lse.data(), qkv.data(), 3 * C, kv.data(),
                              all.data(), B, T, T, C, s.NH);
  EXPECT_TRUE(all_close(got_out, out, 1e-5, 1e-6, "out"));
  EXPECT_TRUE(all_close(got_lse, lse, 1e-5, 1e-6, "lse"));
  std::vector<float> got_dqkv(qkv.size(), 0.0f), got_dkv(kv.size(), 0.0f);
  attention_positions_backward(got_dqkv.data(), 3 * C, got_dkv.data(), dout.data(), qkv.data(),
                               3 * C, kv.data(), out.data(), lse.data(), all.data(), B, T, T, C,
                               s.NH);
  // The query parts of dqkv; the key and value parts arrive in dkv.
  for (size_t row = 0; row < size_t(B) * T; ++row)
    std::copy(got_dkv.begin() + row * 2 * C, got_dkv.begin() + (row + 1) * 2 * C,
              got_dqkv.begin() + row * 3 * C + C);
  EXPECT_TRUE(all_close(got_dqkv, dqkv, 1e-4, 1e-6, "dqkv"));
}

TEST_P(AttentionPositions, RanksOfASequenceAddUpToTheWholeAttention) {
  const Shape s = GetParam();
  const int C = s.NH * s.HS, B = s.B, T = s.T;
  const std::vector<double> qkv = random_normal<double>(size_t(B) * T * 3 * C, 21);
  const std::vector<double> dout = random_normal<double>(size_t(B) * T * C, 22);
  const std::vector<double> kv = keys_and_values(qkv, B, T, C);
  std::vector<int> all(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) all[t] = t;
  std::vector<double> out(size_t(B) * T * C), lse(size_t(B) * s.NH * T);
  attention_positions_forward(out.data(), lse.data(), qkv.data(), 3 * C, kv.data(), all.data(),
                              B, T, T, C, s.NH);
  std::vector<double> dq(size_t(B) * T * C), dkv(kv.size(), 0.0);
  attention_positions_backward(dq.data(), C, dkv.data(), dout.data(), qkv.data(), 3 * C,
                               kv.data(), out.data(), lse.data(), all.data(), B, T, T, C, s.NH);
  for (const int N : {2, 3}) {
    if (2 * N > T) continue;
    SCOPED_TRACE("N = " + std::to_string(N));
    std::vector<double> dkv_sum(kv.size(), 0.0);
    for (int rank = 0; rank < N; ++rank) {
      const std::vector<int> positions = rank_positions(T, N, rank);
      const int Tq = static_cast<int>(positions.size());
      const std::vector<double> q_rows = rows(qkv, B, T, 3 * C, positions);
      const std::vector<double> dout_rows = rows(dout, B, T, C, positions);
      std::vector<double> rank_out(size_t(B) * Tq * C), rank_lse(size_t(B) * s.NH * Tq);
      attention_positions_forward(rank_out.data(), rank_lse.data(), q_rows.data(), 3 * C,
                                  kv.data(), positions.data(), B, Tq, T, C, s.NH);
      EXPECT_TRUE(all_close(rank_out, rows(out, B, T, C, positions), 1e-14, 1e-15, "rank out"));
      std::vector<double> rank_dq(size_t(B) * Tq * C);
      attention_positions_backward(rank_dq.data(), C, dkv_sum.data(), dout_rows.data(),
                                   q_rows.data(), 3 * C, kv.data(), rank_out.data(),
                                   rank_lse.data(), positions.data(), B, Tq, T, C, s.NH);
      EXPECT_TRUE(all_close(rank_dq, rows(dq, B, T, C, positions), 1e-13, 1e-14, "rank dq"));
    }
    EXPECT_TRUE(all_close(dkv_sum, dkv, 1e-13, 1e-14, "dkv summed over the ranks"));
  }
}

INSTANTIATE_TEST_SUITE_P(OddShapes, AttentionPositions,
                         ::testing::Values(Shape{1, 1, 1, 3}, Shape{2, 7, 2, 3},
                                           Shape{2, 13, 3, 4}, Shape{1, 29, 2, 8}));

// d(sum(weights * out)) / d(q, kv) by central differences, for one rank's positions.
TEST(AttentionPositionsGradient, MatchesFiniteDifferences) {
  const int B = 2, T = 9, NH = 2, HS = 3, C = NH * HS;
  const std::vector<int> positions = rank_positions(T, 2, 1);  // chunks 1 and 2 of 4
  const int Tq = static_cast<int>(positions.size());
  std::vector<double> q = random_normal<double>(size_t(B) * Tq * C, 31);
  std::vector<double> kv = random_normal<double>(size_t(B) * T * 2 * C, 32);
  const std::vector<double> weights = random_normal<double>(size_t(B) * Tq * C, 33);
  std::vector<double> out(weights.size()), lse(size_t(B) * NH * Tq);
  const auto objective = [&] {
    attention_positions_forward(out.data(), lse.data(), q.data(), C, kv.data(), positions.data(),
                                B, Tq, T, C, NH);
    return test::weighted_sum(out, weights);
  };
  objective();
  std::vector<double> dq(q.size()), dkv(kv.size(), 0.0);
  attention_positions_backward(dq.data(), C, dkv.data(), weights.data(), q.data(), C, kv.data(),
                               out.data(), lse.data(), positions.data(), B, Tq, T, C, NH);
  EXPECT_TRUE(all_close(dq, test::numeric_gradient(q, objective), 1e-6, 1e-7, "dq"));
  EXPECT_TRUE(all_close(dkv, test::numeric_gradient(kv, objective), 1e-6, 1e-7, "dkv"));
}

TEST(AttentionPositions, RefusesAPositionOutsideTheSequence) {
  const int C = 4, NH = 1;
  std::vector<float> q(C), kv(2 * 2 * C), out(C), lse(1);
  const int past_the_end = 2;
  EXPECT_THROW(attention_positions_forward(out.data(), lse.data(), q.data(), C, kv.data(),
                                           &past_the_end, 1, 1, 2, C, NH),
               gpt2::Error);
}

}  // namespace
}  // namespace gpt2::cpu
