// Tests of kernels/cpu/crossentropy: losses and probabilities against a softmax computed
// independently in double, padded columns [V, Vp) excluded and written as 0 (forward and
// backward), dlogits against finite differences (double), thread-count independence, and the
// fused forward + backward equal to the two composed (also in place).
#include "kernels/cpu/crossentropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <vector>

#include "base/error.h"
#include "tests/kernels/kernel_test_utils.h"

namespace gpt2::cpu {
namespace {

using test::all_close;
using test::random_normal;

struct CrossEntropyShape {
  int B, T, V, Vp;
  double logit_offset;  // added to every real logit: softmax must be shift-invariant
};

void PrintTo(const CrossEntropyShape& s, std::ostream* os) {
  *os << "B=" << s.B << " T=" << s.T << " V=" << s.V << " Vp=" << s.Vp << " offset "
      << s.logit_offset;
}

class CrossEntropyTest : public ::testing::TestWithParam<CrossEntropyShape> {};

TEST_P(CrossEntropyTest, MatchesDoubleSoftmaxAndZeroesPadding) {
  const CrossEntropyShape p = GetParam();
  const int B = p.B, T = p.T, V = p.V, Vp = p.Vp, BT = B * T;
  auto logits = random_normal<float>(BT * Vp, 1, 3.0);
  for (int bt = 0; bt < BT; ++bt) {
    for (int v = 0; v < V; ++v) logits[bt * Vp + v] += static_cast<float>(p.logit_offset);
    // Padding holds garbage larger than any real logit: it must not enter the softmax.
    for (int v = V; v < Vp; ++v) logits[bt * Vp + v] = 1e4f;
  }
  const auto targets = test::random_tokens(BT, 2, V);
  const auto dlosses = random_normal<float>(BT, 3);
  auto losses = test::poisoned<float>(BT);
  auto probs = test::poisoned<float>(BT * Vp);
  crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), B, T, V, Vp);
  auto dlogits = test::poisoned<float>(BT * Vp);
  crossentropy_backward(dlogits.data(), dlosses.data(), probs.data(), targets.data(), B, T, V, Vp);

  std::vector<double> ref_losses(BT), ref_probs(BT * Vp, 0.0), ref_dlogits(BT * Vp, 0.0);
  for (int bt = 0; bt < BT; ++bt) {
    const float* row = logits.data() + bt * Vp;
    const double max_logit = *std::max_element(row, row + V);
    double sum = 0.0;
    for (int v = 0; v < V; ++v) sum += std::exp(row[v] - max_logit);
    for (int v = 0; v < V; ++v) {
      ref_probs[bt * Vp + v] = std::exp(row[v] - max_logit) / sum;
      ref_dlogits[bt * Vp + v] =
          (ref_probs[bt * Vp + v] - (v == targets[bt] ? 1.0 : 0.0)) * dlosses[bt];
    }
    ref_losses[bt] = -std::log(ref_probs[bt * Vp + targets[bt]]);
  }
  EXPECT_TRUE(all_close(losses, ref_losses, 1e-6, 1e-6, "losses vs -log softmax"));
  EXPECT_TRUE(all_close(probs, ref_probs, 1e-6, 1e-12, "probs"));
  EXPECT_TRUE(all_close(dlogits, ref_dlogits, 1e-6, 1e-7, "dlogits"));
  for (int bt = 0; bt < BT; ++bt) {
    for (int v = V; v < Vp; ++v) {
      ASSERT_EQ(probs[bt * Vp + v], 0.0f) << "padded prob " << bt << "," << v;
      ASSERT_EQ(dlogits[bt * Vp + v], 0.0f) << "padded dlogit " << bt << "," << v;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyTest,
                         ::testing::Values(CrossEntropyShape{1, 1, 5, 5, 0.0},
                                           CrossEntropyShape{2, 3, 11, 16, 0.0},
                                           CrossEntropyShape{1, 17, 1000, 1024, 0.0},
                                           CrossEntropyShape{2, 3, 300, 320, 80.0},
                                           CrossEntropyShape{2, 3, 300, 320, -80.0}));

TEST(CrossEntropy, GradientMatchesFiniteDifferencesInDouble) {
  constexpr int B = 2, T = 3, V = 11, Vp = 16, BT = B * T;
  std::vector<double> logits = random_normal<double>(BT * Vp, 11, 2.0);
  const auto targets = test::random_tokens(BT, 12, V);
  const auto dlosses = random_normal<double>(BT, 13);  // R in L = sum(losses * R)
  std::vector<double> losses(BT), probs(BT * Vp);
  auto objective = [&] {
    crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), B, T, V, Vp);
    return test::weighted_sum(losses, dlosses);
  };
  objective();
  auto dlogits = test::poisoned<double>(BT * Vp);
  crossentropy_backward(dlogits.data(), dlosses.data(), probs.data(), targets.data(), B, T, V, Vp);
  // The padded columns get 0 from both sides: the objective does not depend on them.
  EXPECT_TRUE(all_close(dlogits, test::numeric_gradient(logits, objective), 1e-6, 1e-7,
                        "dlogits"));
}

TEST(CrossEntropy, TargetOutsideTheVocabularyIsAnError) {
  constexpr int B = 1, T = 2, V = 5, Vp = 8;
  const auto logits = random_normal<float>(B * T * Vp, 31);
  std::vector<float> losses(B * T), probs(B * T * Vp), dlosses(B * T, 1.f), dlogits(B * T * Vp);
  for (const int bad_target : {V, Vp, -1}) {  // a padding column is not a token either
    const std::vector<int> targets = {0, bad_target};
    EXPECT_THROW(crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(),
                                      B, T, V, Vp),
                 gpt2::Error)
        << bad_target;
    EXPECT_THROW(crossentropy_backward(dlogits.data(), dlosses.data(), probs.data(),
                                       targets.data(), B, T, V, Vp),
                 gpt2::Error)
        << bad_target;
  }
}

TEST(CrossEntropy, BitIdenticalForAnyThreadCount) {
  constexpr int B = 2, T = 17, V = 1000, Vp = 1024, BT = B * T;  // above the parallel threshold
  const auto logits = random_normal<float>(BT * Vp, 21, 3.0);
  const auto targets = test::random_tokens(BT, 22, V);
  const auto dlosses = random_normal<float>(BT, 23);
  std::vector<std::vector<float>> results[2];
  for (int run = 0; run < 2; ++run) {
    test::ScopedThreadCount threads(test::kThreadCountsToCompare[run]);
    std::vector<float> losses(BT), probs(BT * Vp), dlogits(BT * Vp);
    crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), B, T, V, Vp);
    crossentropy_backward(dlogits.data(), dlosses.data(), probs.data(), targets.data(), B, T, V,
                          Vp);
    results[run] = {losses, probs, dlogits};
  }
  const char* names[] = {"losses", "probs", "dlogits"};
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(test::bit_identical(results[0][i], results[1][i], names[i]));
}

TEST(CrossEntropy, FusedForwardBackwardEqualsThePairAlsoInPlace) {
  constexpr int B = 3, T = 5, V = 37, Vp = 40, BT = B * T;  // V odd, padded
  const auto logits = random_normal<float>(BT * Vp, 41, 3.0);
  const auto targets = test::random_tokens(BT, 42, V);
  const float dloss = 0.75f / BT;
  std::vector<float> losses(BT), probs(BT * Vp), dlogits(BT * Vp);
  crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), B, T, V, Vp);
  const std::vector<float> dlosses(BT, dloss);
  crossentropy_backward(dlogits.data(), dlosses.data(), probs.data(), targets.data(), B, T, V, Vp);

  auto fused_losses = test::poisoned<float>(BT);
  auto fused_dlogits = test::poisoned<float>(BT * Vp);
  crossentropy_forward_backward(fused_losses.data(), fused_dlogits.data(), logits.data(),
                                targets.data(), dloss, B, T, V, Vp);
  EXPECT_TRUE(test::bit_identical(fused_losses, losses, "fused losses"));
  EXPECT_TRUE(test::bit_identical(fused_dlogits, dlogits, "fused dlogits"));

  std::vector<float> in_place = logits;
  fused_losses = test::poisoned<float>(BT);
  crossentropy_forward_backward(fused_losses.data(), in_place.data(), in_place.data(),
                                targets.data(), dloss, B, T, V, Vp);
  EXPECT_TRUE(test::bit_identical(fused_losses, losses, "in-place fused losses"));
  EXPECT_TRUE(test::bit_identical(in_place, dlogits, "in-place fused dlogits"));
}

}  // namespace
}  // namespace gpt2::cpu
