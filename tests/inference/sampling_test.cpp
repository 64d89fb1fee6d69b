// TokenSampler (inference/sampling.h): the inverse-CDF pick at the boundaries, draw frequencies
// that follow softmax(logits / temperature), greedy and its equivalents (top-k = 1, a tiny
// top-p, the lowest id among equal logits), top-k and top-p candidate sets, top-p = 1 keeping
// every token, one coin per token, and refusing non-finite logits.
#include "inference/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/error.h"
#include "base/rng.h"

namespace gpt2 {
namespace {

// Logits whose softmax at temperature 1 is probs (zeros become a very low logit).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(p > 0 ? static_cast<float>(std::log(p)) : -1e4f);
  return logits;
}

TEST(Sampling, InverseCdfBoundaries) {
  const std::vector<float> logits = logits_of({0.0, 0.25, 0.0, 0.75, 0.0});
  TokenSampler sampler(SamplingOptions{});
  EXPECT_EQ(sampler.pick(logits.data(), 5, 0.0), 1);
  EXPECT_EQ(sampler.pick(logits.data(), 5, 0.2499), 1);
  EXPECT_EQ(sampler.pick(logits.data(), 5, 0.2501), 3);
  EXPECT_EQ(sampler.pick(logits.data(), 5, 0.999999), 3);
  // A coin at the very top gives the last token that can be drawn, never an impossible one.
  EXPECT_EQ(sampler.pick(logits.data(), 5, std::nextafter(1.0, 0.0)), 3);
}

TEST(Sampling, FrequenciesFollowTheTemperedSoftmax) {
  const std::vector<float> logits = logits_of({0.1, 0.0, 0.6, 0.3});
  for (float temperature : {1.0f, 0.5f}) {
    SCOPED_TRACE(temperature);
    SamplingOptions options;
    options.temperature = temperature;
    TokenSampler sampler(options);
    // softmax(log p / temperature) = p^(1/temperature), normalized.
    std::vector<double> expected = {std::pow(0.1, 1.0 / temperature), 0.0,
                                    std::pow(0.6, 1.0 / temperature),
                                    std::pow(0.3, 1.0 / temperature)};
    double total = 0;
    for (double e : expected) total += e;
    Rng rng(42);
    std::vector<int> counts(4, 0);
    constexpr int kDraws = 20000;
    for (int i = 0; i < kDraws; ++i) ++counts[sampler.sample(logits.data(), 4, rng)];
    EXPECT_EQ(counts[1], 0);
    // Binomial standard deviation is at most sqrt(20000 * 0.25) ~ 71 draws; allow ~4.5 sigma.
    for (int i : {0, 2, 3}) EXPECT_NEAR(counts[i], kDraws * expected[i] / total, 320) << i;
  }
}

TEST(Sampling, GreedyTopK1AndTinyTopPPickTheHighestLogitLowestIdFirst) {
  Rng rng(3);
  std::vector<float> logits(97);
  for (float& x : logits) x = static_cast<float>(rng.normal());
  logits[40] = 5.0f;
  logits[71] = 5.0f;  // a tie: the lower id wins
  SamplingOptions greedy;
  greedy.greedy = true;
  SamplingOptions top_k1;
  top_k1.top_k = 1;
  SamplingOptions tiny_p;
  tiny_p.top_p = 1e-6f;
  SamplingOptions tiny_p_hot = tiny_p;
  tiny_p_hot.temperature = 3.0f;
  for (const SamplingOptions& options : {greedy, top_k1, tiny_p, tiny_p_hot}) {
    TokenSampler sampler(options);
    for (double coin : {0.0, 0.3, 0.999}) EXPECT_EQ(sampler.pick(logits.data(), 97, coin), 40);
  }
}

TEST(Sampling, GreedyDrawsNothingOtherModesOneCoinPerToken) {
  const std::vector<float> logits = {0.1f, 0.4f, -0.2f, 0.3f};
  SamplingOptions greedy;
  greedy.greedy = true;
  SamplingOptions full;
  SamplingOptions cut;
  cut.top_k = 2;
  cut.top_p = 0.5f;
  cut.temperature = 0.7f;
  for (const SamplingOptions& options : {greedy, full, cut}) {
    TokenSampler sampler(options);
    Rng rng(9), reference(9);
    sampler.sample(logits.data(), 4, rng);
    if (!options.greedy) reference.uniform();
    EXPECT_EQ(rng.state(), reference.state());
  }
}

TEST(Sampling, TopKKeepsTheKHighestLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f, 2.5f};
  SamplingOptions options;
  options.top_k = 3;  // ids 1, 4, 2
  TokenSampler sampler(options);
  Rng rng(5);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 3000; ++i) ++counts[sampler.sample(logits.data(), 5, rng)];
  EXPECT_EQ(counts[0], 0);
  EXPECT_EQ(counts[3], 0);
  for (int i : {1, 2, 4}) EXPECT_GT(counts[i], 0) << i;
  // Weights exp(3), exp(2.5), exp(2) over their sum: id 1 about half the draws.
  const double p1 = std::exp(3.0) / (std::exp(3.0) + std::exp(2.5) + std::exp(2.0));
  EXPECT_NEAR(counts[1], 3000 * p1, 150);
  // top_k >= n keeps everything, like top_k = 0.
  SamplingOptions all;
  all.top_k = 5;
  TokenSampler everything(all), plain(SamplingOptions{});
  for (double coin = 0.0; coin < 1.0; coin += 0.01)
    EXPECT_EQ(everything.pick(logits.data(), 5, coin), plain.pick(logits.data(), 5, coin));
}

TEST(Sampling, TopPKeepsTheSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 at ids 2, 0, 3, 1.
  const std::vector<float> logits = logits_of({0.3, 0.05, 0.5, 0.15});
  auto support = [&](float top_p) {
    SamplingOptions options;
    options.top_p = top_p;
    TokenSampler sampler(options);
    std::vector<int> seen;
    for (double coin = 0.0; coin < 1.0; coin += 0.001) {
      const int token = sampler.pick(logits.data(), 4, coin);
      if (std::find(seen.begin(), seen.end(), token) == seen.end()) seen.push_back(token);
    }
    std::sort(seen.begin(), seen.end());
    return seen;
  };
  EXPECT_EQ(support(0.45f), std::vector<int>({2}));       // 0.5 alone reaches 0.45
  EXPECT_EQ(support(0.6f), std::vector<int>({0, 2}));     // 0.8
  EXPECT_EQ(support(0.9f), std::vector<int>({0, 2, 3}));  // 0.95
  EXPECT_EQ(support(1.0f), std::vector<int>({0, 1, 2, 3}));
  // top_p = 1 is the plain sampler, coin for coin.
  SamplingOptions one;
  one.top_p = 1.0f;
  TokenSampler with_p(one), plain(SamplingOptions{});
  for (double coin = 0.0; coin < 1.0; coin += 0.001)
    EXPECT_EQ(with_p.pick(logits.data(), 4, coin), plain.pick(logits.data(), 4, coin));
}

TEST(Sampling, TopKThenTopPAndLargeVocabularies) {
  Rng rng(11);
  std::vector<float> logits(50257);
  for (float& x : logits) x = static_cast<float>(3.0 * rng.normal());
  SamplingOptions options;
  options.top_k = 40;
  options.top_p = 0.9f;
  options.temperature = 0.8f;
  TokenSampler sampler(options);
  std::vector<int> ranked(logits.size());
  for (size_t i = 0; i < ranked.size(); ++i) ranked[i] = static_cast<int>(i);
  std::sort(ranked.begin(), ranked.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const std::vector<int> top40(ranked.begin(), ranked.begin() + 40);
  for (int i = 0; i < 200; ++i) {
    const int token = sampler.sample(logits.data(), static_cast<int>(logits.size()), rng);
    EXPECT_NE(std::find(top40.begin(), top40.end(), token), top40.end()) << token;
  }
}

TEST(Sampling, NonFiniteLogitsAndBadOptionsAreRefused) {
  std::vector<float> logits = {0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  TokenSampler sampler(SamplingOptions{});
  EXPECT_THROW(sampler.pick(logits.data(), 3, 0.5), Error);
  logits[1] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(sampler.pick(logits.data(), 3, 0.5), Error);
  SamplingOptions bad;
  bad.temperature = 0.0f;
  EXPECT_THROW(TokenSampler{bad}, Error);
  bad.greedy = true;  // greedy ignores the temperature
  EXPECT_NO_THROW(TokenSampler{bad});
  SamplingOptions bad_p;
  bad_p.top_p = 0.0f;
  EXPECT_THROW(TokenSampler{bad_p}, Error);
  bad_p.top_p = 1.5f;
  EXPECT_THROW(TokenSampler{bad_p}, Error);
  SamplingOptions bad_k;
  bad_k.top_k = -1;
  EXPECT_THROW(TokenSampler{bad_k}, Error);
}

}  // namespace
}  // namespace gpt2
