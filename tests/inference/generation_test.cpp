// generate() and its helpers (inference/generation.h), on the CPU model and on a scripted model:
// - per-sequence RNG streams are Rng(seed) jumped i times; the same seed gives the same
//   tokens, another seed other tokens;
// - a batch of sequences equals generating each alone with its stream (top-k, top-p and a
//   temperature in play); top-k = 1 equals greedy;
// - each sequence stops at the <|endoftext|> it produced, the others go on, ended ones are fed
//   their last token and draw nothing; tokens are reported step by step in sequence order;
// - a prompt and length beyond the model's context are refused, unless the window slides,
//   where training samples equal recomputing the latest seq_len tokens at every step (what
//   the trainer did before the cache);
// - Utf8Stream never splits a character and passes every byte through.
#include "inference/generation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "data/tokenizer.h"
#include "model/cpu_model.h"
#include "model/parameters.h"

namespace gpt2 {
namespace {

constexpr int kEot = Gpt2Tokenizer::kEndOfText;

ModelConfig small_config(int vocab_size) {
  ModelConfig c;
  c.max_seq_len = 64;
  c.vocab_size = vocab_size;
  c.padded_vocab_size = padded_vocab(vocab_size);
  c.num_layers = 2;
  c.num_heads = 2;
  c.channels = 32;
  return c;
}

// A CPU model with GPT-2's initialization scaled up (weights ~ 10x), so that samples are far
// from uniform and a top-k / top-p cut matters.
std::unique_ptr<Model> cpu_model(int vocab_size, int batch, int seq_len, uint64_t seed = 7) {
  ModelOptions options;
  options.config = small_config(vocab_size);
  options.batch_size = batch;
  options.seq_len = seq_len;
  std::unique_ptr<Model> model = make_cpu_model(options);
  std::vector<float> params(ParameterLayout::for_config(options.config).total);
  init_parameters(params.data(), options.config, seed);
  for (float& p : params) p *= 10.0f;
  model->set_parameters(params.data());
  return model;
}

TEST(Generation, SequenceRngsAreJumpedStreams) {
  const std::vector<Rng> rngs = sequence_rngs(99, 3);
  ASSERT_EQ(rngs.size(), 3u);
  Rng expected(99);
  for (const Rng& rng : rngs) {
    EXPECT_EQ(rng.state(), expected.state());
    expected.jump();
  }
  // The streams do not start inside each other.
  Rng a = rngs[0], b = rngs[1];
  std::vector<uint64_t> first, second;
  for (int i = 0; i < 1000; ++i) first.push_back(a.next_u64());
  for (int i = 0; i < 1000; ++i) second.push_back(b.next_u64());
  std::sort(first.begin(), first.end());
  for (uint64_t x : second) EXPECT_FALSE(std::binary_search(first.begin(), first.end(), x));
}

TEST(Generation, SameSeedSameTokensOtherSeedOtherTokens) {
  std::unique_ptr<Model> model = cpu_model(300, 2, 40);
  const std::vector<int> prompt = {5, 17, 2};
  GenerationOptions options;
  options.max_new_tokens = 30;
  auto run = [&](uint64_t seed) {
    std::vector<Rng> rngs = sequence_rngs(seed, 2);
    return generate(*model, prompt, options, rngs);
  };
  const auto first = run(1), again = run(1), other = run(2);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  EXPECT_NE(first[0], first[1]);  // two streams, two texts
  for (const auto& tokens : first) EXPECT_EQ(tokens.size(), 30u);
}

TEST(Generation, BatchedSequencesEqualEachGeneratedAlone) {
  std::unique_ptr<Model> model = cpu_model(300, 3, 40);
  const std::vector<int> prompt = {9, 8, 7, 6};
  GenerationOptions options;
  options.max_new_tokens = 25;
  options.sampling.temperature = 0.8f;
  options.sampling.top_k = 50;
  options.sampling.top_p = 0.9f;
  std::vector<Rng> rngs = sequence_rngs(2024, 3);
  const std::vector<Rng> start = rngs;
  GenerationStats stats;
  const auto batched = generate(*model, prompt, options, rngs, nullptr, &stats);
  EXPECT_EQ(stats.sequences, 3);
  EXPECT_EQ(stats.prompt_tokens, 4);
  EXPECT_EQ(stats.decode_steps, 24);
  EXPECT_EQ(stats.generated_tokens, 75);
  for (int i = 0; i < 3; ++i) {
    std::vector<Rng> alone = {start[i]};
    const auto single = generate(*model, prompt, options, alone);
    EXPECT_EQ(single[0], batched[i]) << "sequence " << i;
    EXPECT_EQ(alone[0].state(), rngs[i].state()) << "sequence " << i;  // the same draws
  }
}

TEST(Generation, TopK1EqualsGreedy) {
  std::unique_ptr<Model> model = cpu_model(300, 2, 40);
  const std::vector<int> prompt = {1, 2, 3};
  GenerationOptions greedy;
  greedy.max_new_tokens = 20;
  greedy.sampling.greedy = true;
  GenerationOptions top1 = greedy;
  top1.sampling.greedy = false;
  top1.sampling.top_k = 1;
  top1.sampling.temperature = 1.7f;
  std::vector<Rng> a = sequence_rngs(5, 2), b = sequence_rngs(6, 2);
  const auto greedy_tokens = generate(*model, prompt, greedy, a);
  EXPECT_EQ(greedy_tokens, generate(*model, prompt, top1, b));
  EXPECT_EQ(greedy_tokens[0], greedy_tokens[1]);  // greedy ignores the streams
  EXPECT_EQ(a[0].state(), sequence_rngs(5, 1)[0].state());  // and draws nothing
}

// A Model whose generation session follows a script: the favored next token of sequence b is
// script(b, tokens so far), with logit 10 against 0 for every other token. Records what each
// decode step was fed. Everything but generation throws.
class ScriptedModel final : public Model {
 public:
  using Script = int (*)(int sequence, const std::vector<int>& tokens);
  ScriptedModel(int batch, int seq_len, Script script) : script_(script) {
    options_.config = small_config(kGpt2VocabSize);
    options_.batch_size = batch;
    options_.seq_len = seq_len;
  }
  const ModelOptions& options() const override { return options_; }
  DeviceKind device() const override { return DeviceKind::kCpu; }
  std::string device_name() const override { return "scripted"; }
  std::string attention_kernel() const override { return "none"; }
  void set_parameters(const float*) override { fail(); }
  void get_parameters(float*) const override { fail(); }
  void zero_grad() override { fail(); }
  float forward_backward(const int*, const int*, float) override { fail(); }
  float evaluate(const int*, const int*) override { fail(); }
  void reduce_gradients() override { fail(); }
  float grad_norm() override { fail(); }
  void adamw_step(const AdamWHyper&, int, float) override { fail(); }
  void get_optimizer_state(float*, float*) const override { fail(); }
  void set_optimizer_state(const float*, const float*) override { fail(); }
  const MemoryPlan& memory_plan() const override { return plan_; }
  size_t peak_memory_bytes() const override { return 0; }

  void start_generation(int batch, int max_len) override {
    GPT2_CHECK(batch >= 1 && batch <= options_.batch_size && max_len <= options_.seq_len);
    sequences_.assign(static_cast<size_t>(batch), {});
    max_len_ = max_len;
    length_ = 0;
  }
  void prefill(const int* prompts, int length, float* logits) override {
    GPT2_CHECK(length_ >= 0 && length <= max_len_);
    for (size_t b = 0; b < sequences_.size(); ++b)
      sequences_[b].assign(prompts + b * length, prompts + (b + 1) * length);
    length_ = length;
    ++prefills_;
    write_logits(logits);
  }
  void decode_step(const int* next_tokens, float* logits) override {
    GPT2_CHECK(length_ >= 1 && length_ < max_len_, "past max_len");
    fed_.emplace_back(next_tokens, next_tokens + sequences_.size());
    for (size_t b = 0; b < sequences_.size(); ++b) sequences_[b].push_back(next_tokens[b]);
    ++length_;
    write_logits(logits);
  }
  int generation_length() const override { return length_; }

  const std::vector<std::vector<int>>& fed() const { return fed_; }
  int prefills() const { return prefills_; }

 private:
  [[noreturn]] static void fail() { GPT2_FAIL("not part of the script"); }
  void write_logits(float* logits) const {
    const size_t V = kGpt2VocabSize;
    std::fill(logits, logits + sequences_.size() * V, 0.0f);
    for (size_t b = 0; b < sequences_.size(); ++b)
      logits[b * V + script_(static_cast<int>(b), sequences_[b])] = 10.0f;
  }

  Script script_;
  ModelOptions options_;
  MemoryPlan plan_;
  std::vector<std::vector<int>> sequences_, fed_;
  int max_len_ = 0, length_ = -1, prefills_ = 0;
};

// Sequence 1 produces <|endoftext|> as its third token; the others count up from their length.
int end_sequence_1_early(int sequence, const std::vector<int>& tokens) {
  const int length = static_cast<int>(tokens.size());
  if (sequence == 1 && length == 4) return kEot;  // the prompt is 2 tokens
  return 100 * sequence + length;
}

TEST(Generation, EachSequenceStopsAtTheEndOfTextItProduced) {
  ScriptedModel model(3, 16, end_sequence_1_early);
  GenerationOptions options;
  options.max_new_tokens = 6;
  options.sampling.greedy = true;
  std::vector<Rng> rngs = sequence_rngs(1, 3);
  std::vector<std::pair<int, int>> reported;
  const auto tokens = generate(model, {kEot, 42}, options, rngs,
                               [&](int b, int token) { reported.emplace_back(b, token); });
  EXPECT_EQ(tokens[0], std::vector<int>({2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(tokens[1], std::vector<int>({102, 103, kEot}));  // the end-of-text included
  EXPECT_EQ(tokens[2], std::vector<int>({202, 203, 204, 205, 206, 207}));
  // Reported as produced: step by step, sequences in order, nothing after the end.
  std::vector<std::pair<int, int>> expected;
  for (int step = 0; step < 6; ++step)
    for (int b = 0; b < 3; ++b)
      if (step < static_cast<int>(tokens[b].size())) expected.emplace_back(b, tokens[b][step]);
  EXPECT_EQ(reported, expected);
  // 5 decode steps for 6 tokens; the ended sequence is fed its end-of-text again.
  ASSERT_EQ(model.fed().size(), 5u);
  for (size_t step = 2; step < 5; ++step) EXPECT_EQ(model.fed()[step][1], kEot) << step;

  // Without stopping it goes on past the end-of-text.
  options.stop_at_end_of_text = false;
  const auto unstopped = generate(model, {kEot, 42}, options, rngs);
  EXPECT_EQ(unstopped[1].size(), 6u);
  EXPECT_EQ(unstopped[1][2], kEot);

  // When every sequence has ended, generation stops early.
  ScriptedModel all_end(2, 16, [](int, const std::vector<int>&) { return kEot; });
  options.stop_at_end_of_text = true;
  std::vector<Rng> two = sequence_rngs(1, 2);
  const auto ended = generate(all_end, {1}, options, two);
  EXPECT_EQ(ended, std::vector<std::vector<int>>({{kEot}, {kEot}}));
  EXPECT_TRUE(all_end.fed().empty());
}

TEST(Generation, LengthBeyondTheContextIsRefusedUnlessTheWindowSlides) {
  ScriptedModel model(1, 8, end_sequence_1_early);
  GenerationOptions options;
  options.sampling.greedy = true;
  std::vector<Rng> rngs = sequence_rngs(1, 1);
  options.max_new_tokens = 6;  // 3 + 6 - 1 = 8 positions: fits exactly
  EXPECT_EQ(generate(model, {1, 2, 3}, options, rngs)[0].size(), 6u);
  EXPECT_EQ(model.prefills(), 1);
  options.max_new_tokens = 7;
  try {
    generate(model, {1, 2, 3}, options, rngs);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("need a context of 9 positions; the model has 8"),
              std::string::npos) << e.what();
  }
  options.slide_window = true;
  options.max_new_tokens = 20;
  const auto slid = generate(model, {1, 2, 3}, options, rngs)[0];
  EXPECT_EQ(slid.size(), 20u);
  // Counting the fed window's length: it grows to 8 and stays there.
  EXPECT_EQ(slid[0], 3);
  EXPECT_EQ(slid[5], 8);
  EXPECT_EQ(slid.back(), 8);
  // A prompt longer than the window is cut to its latest tokens.
  const auto long_prompt = generate(model, std::vector<int>(12, 5), options, rngs)[0];
  EXPECT_EQ(long_prompt.front(), 8);
}

// The trainer's sample with a window of 8 positions and 20 tokens against what it did before
// the cache: a full forward over the latest 8 tokens for every token, one coin each.
TEST(Generation, TrainingSampleEqualsRecomputingTheLatestWindow) {
  constexpr int kWindow = 8, kTokens = 20;
  std::unique_ptr<Model> model = cpu_model(kGpt2VocabSize, 1, kWindow, 3);
  std::vector<float> params(ParameterLayout::for_config(model->options().config).total);
  model->get_parameters(params.data());
  CpuGpt2<float> full(model->options().config, 1, kWindow, AttentionKind::kFlash);
  std::copy(params.begin(), params.end(), full.params());

  Rng rng(77), reference_rng(77);
  const std::vector<int> sample = generate_training_sample(*model, kTokens, rng);

  TokenSampler sampler(SamplingOptions{});
  std::vector<int> tokens = {kEot};
  const int Vp = model->options().config.padded_vocab_size;
  for (int i = 0; i < kTokens; ++i) {
    const int length = std::min(static_cast<int>(tokens.size()), kWindow);
    full.forward(tokens.data() + tokens.size() - length, nullptr, 1, length);
    tokens.push_back(sampler.sample(full.buffer(kBufLogits) + size_t(length - 1) * Vp,
                                    kGpt2VocabSize, reference_rng));
  }
  EXPECT_EQ(sample, std::vector<int>(tokens.begin() + 1, tokens.end()));
  EXPECT_EQ(rng.state(), reference_rng.state());
}

TEST(Utf8Stream, HoldsBackSplitCharactersAndPassesEveryByte) {
  // "a", then "é" (C3 A9) split, "€" (E2 82 AC) split in three, "😀" (F0 9F 98 80) split.
  const std::vector<std::string> pieces = {"a\xC3", "\xA9", "\xE2", "\x82", "\xAC b\xF0\x9F",
                                           "\x98", "\x80"};
  Utf8Stream stream;
  std::vector<std::string> out;
  for (const std::string& piece : pieces) out.push_back(stream.push(piece));
  out.push_back(stream.finish());
  EXPECT_EQ(out, std::vector<std::string>({"a", "\xC3\xA9", "", "", "\xE2\x82\xAC b", "",
                                           "\xF0\x9F\x98\x80", ""}));
  // Invalid bytes are not held for good: a lone continuation byte passes, a truncated
  // character comes out at finish().
  Utf8Stream invalid;
  EXPECT_EQ(invalid.push("\x80\x80x"), "\x80\x80x");
  EXPECT_EQ(invalid.push("\xE2\x82"), "");
  EXPECT_EQ(invalid.push("y"), "\xE2\x82y");  // the character never completed: passed on
  EXPECT_EQ(invalid.push("\xF0"), "");
  EXPECT_EQ(invalid.finish(), "\xF0");
}

}  // namespace
}  // namespace gpt2
