#include "inference/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"

namespace gpt2 {

void validate_sampling_options(const SamplingOptions& options) {
  if (options.greedy) return;
  GPT2_CHECK(options.temperature > 0.0f && std::isfinite(options.temperature), "temperature ",
             options.temperature);
  GPT2_CHECK(options.top_k >= 0, "top_k ", options.top_k);
  GPT2_CHECK(options.top_p > 0.0f && options.top_p <= 1.0f, "top_p ", options.top_p);
}

TokenSampler::TokenSampler(const SamplingOptions& options) : options_(options) {
  validate_sampling_options(options_);
}

int TokenSampler::pick(const float* logits, int n, double coin) {
  GPT2_CHECK(n > 0);
  int best = 0;
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(logits[i]))
      GPT2_FAIL("the model's logit of token ", i, " is ", logits[i],
                ": cannot sample from a diverged model");
    if (logits[i] > logits[best]) best = i;  // strict: the lowest id among equal logits
  }
  if (options_.greedy) return best;

  const double max_logit = logits[best];
  const double inv_temperature = 1.0 / static_cast<double>(options_.temperature);
  weights_.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    weights_[i] = std::exp((static_cast<double>(logits[i]) - max_logit) * inv_temperature);

  const bool cut_k = options_.top_k > 0 && options_.top_k < n;
  const bool cut_p = options_.top_p < 1.0f;
  keep_.assign(static_cast<size_t>(n), cut_k || cut_p ? 0 : 1);
  if (cut_k || cut_p) {
    ranked_.resize(static_cast<size_t>(n));
    std::iota(ranked_.begin(), ranked_.end(), 0);
    const auto before = [logits](int a, int b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    int count = n;
    if (cut_k) {
      count = options_.top_k;
      std::nth_element(ranked_.begin(), ranked_.begin() + count, ranked_.end(), before);
    }
    if (cut_p) {
      std::sort(ranked_.begin(), ranked_.begin() + count, before);
      double total = 0.0;
      for (int r = 0; r < count; ++r) total += weights_[ranked_[r]];
      const double target = static_cast<double>(options_.top_p) * total;
      double cumulative = 0.0;
      int kept = 0;
      while (kept < count) {
        cumulative += weights_[ranked_[kept++]];
        if (cumulative >= target) break;
      }
      count = kept;
    }
    for (int r = 0; r < count; ++r) keep_[ranked_[r]] = 1;
  }

  // Inverse CDF over the candidates in id order.
  double total = 0.0;
  for (int i = 0; i < n; ++i)
    if (keep_[i]) total += weights_[i];
  const double target = coin * total;
  double cumulative = 0.0;
  int last = best;
  for (int i = 0; i < n; ++i) {
    if (!keep_[i] || weights_[i] <= 0.0) continue;  // an underflowed weight is never drawn
    cumulative += weights_[i];
    last = i;
    if (target < cumulative) return i;
  }
  return last;
}

int TokenSampler::sample(const float* logits, int n, Rng& rng) {
  return pick(logits, n, options_.greedy ? 0.0 : rng.uniform());
}

}  // namespace gpt2
