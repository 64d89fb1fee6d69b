#include "train/sampling.h"

#include <algorithm>

#include "base/error.h"
#include "data/tokenizer.h"

namespace gpt2 {

int sample_multinomial(const float* probs, int n, double coin) {
  GPT2_CHECK(n > 0);
  double cumulative = 0.0;
  int last_nonzero = 0;
  for (int i = 0; i < n; ++i) {
    if (probs[i] <= 0.0f) continue;
    cumulative += probs[i];
    last_nonzero = i;
    if (coin < cumulative) return i;
  }
  return last_nonzero;
}

std::vector<int> generate_tokens(Model& model, int num_tokens, Rng& rng) {
  const int context = model.options().seq_len;
  const int vocab = model.options().config.vocab_size;
  std::vector<int> tokens = {Gpt2Tokenizer::kEndOfText};
  std::vector<float> probs(static_cast<size_t>(vocab));
  for (int i = 0; i < num_tokens; ++i) {
    const int length = std::min(static_cast<int>(tokens.size()), context);
    model.next_token_probs(tokens.data() + tokens.size() - length, length, probs.data());
    tokens.push_back(sample_multinomial(probs.data(), vocab, rng.uniform()));
  }
  return std::vector<int>(tokens.begin() + 1, tokens.end());
}

}  // namespace gpt2
