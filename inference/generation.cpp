#include "inference/generation.h"

#include <algorithm>
#include <chrono>

#include "base/error.h"
#include "data/tokenizer.h"

namespace gpt2 {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<Rng> sequence_rngs(uint64_t seed, int count) {
  GPT2_CHECK(count >= 0);
  std::vector<Rng> rngs;
  rngs.reserve(static_cast<size_t>(count));
  Rng stream(seed);
  for (int i = 0; i < count; ++i) {
    rngs.push_back(stream);
    stream.jump();
  }
  return rngs;
}

std::vector<std::vector<int>> generate(Model& model, const std::vector<int>& prompt,
                                       const GenerationOptions& options, std::vector<Rng>& rngs,
                                       const TokenCallback& on_token, GenerationStats* stats) {
  const int B = static_cast<int>(rngs.size());
  const int P = static_cast<int>(prompt.size());
  const int N = options.max_new_tokens;
  // A context-parallel model generates on its own rank, in the rows it holds.
  const int context = model.options().local_seq_len();
  const int V = model.options().config.vocab_size;
  GPT2_CHECK(B >= 1 && B <= model.options().batch_size, "generating ", B,
             " sequences with a model of batch size ", model.options().batch_size);
  GPT2_CHECK(P >= 1, "generation needs a prompt of at least one token");
  GPT2_CHECK(N >= 1, "max_new_tokens ", N);
  // Positions needed: the prompt and every produced token but the last. 64-bit: P + N may
  // exceed int.
  const int64_t needed = static_cast<int64_t>(P) + N - 1;
  if (!options.slide_window && needed > context)
    GPT2_FAIL("a prompt of ", P, " tokens and ", N, " new tokens need a context of ", needed,
              " positions; the model has ", context);
  const int max_len = static_cast<int>(std::min<int64_t>(needed, context));
  TokenSampler sampler(options.sampling);

  // fed[b]: what sequence b has fed the model, plus its next input (ended sequences repeat
  // their last token); all of equal length.
  std::vector<std::vector<int>> fed(static_cast<size_t>(B), prompt);
  std::vector<std::vector<int>> produced(static_cast<size_t>(B));
  std::vector<char> ended(static_cast<size_t>(B), 0);
  std::vector<float> logits(static_cast<size_t>(B) * V);
  std::vector<int> window;
  // The latest `length` tokens of every sequence, (B, length) row-major.
  auto latest = [&](int length) {
    window.resize(static_cast<size_t>(B) * length);
    for (size_t b = 0; b < static_cast<size_t>(B); ++b)
      std::copy(fed[b].end() - length, fed[b].end(), window.begin() + b * length);
    return window.data();
  };

  GenerationStats local;
  local.sequences = B;
  local.prompt_tokens = std::min(P, max_len);
  model.start_generation(B, max_len);
  auto start = std::chrono::steady_clock::now();
  model.prefill(latest(local.prompt_tokens), local.prompt_tokens, logits.data());
  local.prefill_seconds = seconds_since(start);

  std::vector<int> next(static_cast<size_t>(B));
  for (int step = 0;; ++step) {
    bool any_live = false;
    for (int b = 0; b < B; ++b) {
      if (!ended[b]) {
        const int token = sampler.sample(logits.data() + static_cast<size_t>(b) * V, V, rngs[b]);
        produced[b].push_back(token);
        ++local.generated_tokens;
        if (on_token) on_token(b, token);
        if (options.stop_at_end_of_text && token == Gpt2Tokenizer::kEndOfText) ended[b] = 1;
        next[b] = token;
      } else {
        next[b] = fed[b].back();
      }
      fed[b].push_back(next[b]);
      any_live = any_live || !ended[b];
    }
    if (!any_live || step + 1 == N) break;
    start = std::chrono::steady_clock::now();
    if (model.generation_length() < max_len)
      model.decode_step(next.data(), logits.data());
    else  // slide_window: the cache is full; refill it with the latest max_len tokens
      model.prefill(latest(max_len), max_len, logits.data());
    local.decode_seconds += seconds_since(start);
    ++local.decode_steps;
  }
  if (stats) *stats = local;
  return produced;
}

std::vector<int> generate_training_sample(Model& model, int num_tokens, Rng& rng) {
  GenerationOptions options;
  options.max_new_tokens = num_tokens;
  options.stop_at_end_of_text = false;
  options.slide_window = true;
  std::vector<Rng> rngs = {rng};
  std::vector<std::vector<int>> out =
      generate(model, {Gpt2Tokenizer::kEndOfText}, options, rngs);
  rng = rngs[0];
  return out[0];
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes.data(), bytes.size());
  // The last byte that is not a continuation byte (10xxxxxx), looking back at most 4 bytes: if
  // it starts a character longer than the bytes after it, hold it back from there.
  size_t cut = pending_.size();
  const size_t stop = pending_.size() >= 4 ? pending_.size() - 4 : 0;
  for (size_t i = pending_.size(); i > stop; --i) {
    const unsigned char c = static_cast<unsigned char>(pending_[i - 1]);
    if ((c & 0xC0) == 0x80) continue;
    const size_t length = c >= 0xF8 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (pending_.size() - (i - 1) < length) cut = i - 1;
    break;
  }
  std::string ready = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return ready;
}

std::string Utf8Stream::finish() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace gpt2
