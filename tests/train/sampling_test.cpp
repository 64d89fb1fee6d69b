// Multinomial sampling: the inverse-CDF pick at the boundaries, zero-probability tokens never
// drawn, and draw frequencies matching the probabilities.
#include "train/sampling.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/rng.h"

namespace gpt2 {
namespace {

TEST(Sampling, InverseCdfBoundaries) {
  const std::vector<float> probs = {0.0f, 0.25f, 0.0f, 0.75f, 0.0f};
  EXPECT_EQ(sample_multinomial(probs.data(), 5, 0.0), 1);
  EXPECT_EQ(sample_multinomial(probs.data(), 5, 0.2499), 1);
  EXPECT_EQ(sample_multinomial(probs.data(), 5, 0.25), 3);
  EXPECT_EQ(sample_multinomial(probs.data(), 5, 0.999999), 3);
  // Probabilities that sum below the coin (rounding) give the last possible token, never a
  // zero-probability one.
  const std::vector<float> short_sum = {0.5f, 0.49f, 0.0f};
  EXPECT_EQ(sample_multinomial(short_sum.data(), 3, 0.995), 1);
}

TEST(Sampling, FrequenciesFollowProbabilities) {
  const std::vector<float> probs = {0.1f, 0.0f, 0.6f, 0.3f};
  Rng rng(42);
  std::vector<int> counts(4, 0);
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) ++counts[sample_multinomial(probs.data(), 4, rng.uniform())];
  EXPECT_EQ(counts[1], 0);
  // Binomial standard deviation is at most sqrt(20000 * 0.25) ~ 71 draws; allow ~4.5 sigma.
  EXPECT_NEAR(counts[0], 2000, 320);
  EXPECT_NEAR(counts[2], 12000, 320);
  EXPECT_NEAR(counts[3], 6000, 320);
}

}  // namespace
}  // namespace gpt2
