/**
 * @file sampling.h
 * @brief Choosing the next token from a model's logits: greedy, or a draw at a temperature
 *        from the top-k and/or top-p (nucleus) candidates.
 *
 * Greedy takes the highest logit (the lowest id among equal ones) and draws nothing. Otherwise
 * exactly one coin, rng.uniform() in [0, 1), is drawn per token, whatever the options:
 *   1. weights w_i = exp((logit_i - max logit) / temperature), in double;
 *   2. candidates, ranked by logit (descending; the lower id first among equal logits):
 *      top_k > 0 keeps the first top_k; top_p < 1 then keeps the shortest prefix of that
 *      ranking whose weights reach top_p of the candidates' total (at least one token);
 *   3. the token is the first candidate, in id order, whose cumulative weight exceeds
 *      coin * (the candidates' total) (inverse CDF; rounding falls back to the last candidate).
 * So top_k = 1 and a tiny top_p both give the greedy token, top_p = 1 and top_k = 0 keep the
 * whole vocabulary, and the same logits and coin always give the same token.
 * Logits must be finite: a NaN or infinite logit (a diverged model) throws gpt2::Error.
 */
#pragma once

#include <vector>

#include "base/rng.h"

namespace gpt2 {

struct SamplingOptions {
  bool greedy = false;       // argmax; temperature, top_k and top_p are then unused
  float temperature = 1.0f;  // > 0 unless greedy
  int top_k = 0;             // 0 keeps every token
  float top_p = 1.0f;        // in (0, 1]; 1 keeps every token
};

/// Throws gpt2::Error for options outside the ranges above.
void validate_sampling_options(const SamplingOptions& options);

/// The next-token chooser of training samples and gpt2-generate; holds scratch space, so keep
/// one per thread.
class TokenSampler {
 public:
  explicit TokenSampler(const SamplingOptions& options);

  const SamplingOptions& options() const { return options_; }

  /// The token for logits (n values) and a coin in [0, 1) (ignored when greedy).
  int pick(const float* logits, int n, double coin);
  /// pick() with one rng.uniform() drawn, none when greedy.
  int sample(const float* logits, int n, Rng& rng);

 private:
  SamplingOptions options_;
  std::vector<double> weights_;  // (n)
  std::vector<int> ranked_;      // candidate ids by descending logit
  std::vector<char> keep_;       // (n) candidate mask
};

}  // namespace gpt2
