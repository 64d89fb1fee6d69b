/**
 * @file generation_test.cpp
 * @brief The CPU model's generation session (model.h, cpu_model.h): the key/value cache
 *        against the full forward.
 *
 * - Prefill and every decode step give the logits a full forward over the same tokens gives
 *   at that position, for every position, several sequences at once, both attention kinds;
 *   the naive model bit for bit (decode runs the naive row function), flash within 1e-5 of
 *   the logits' scale; CpuGpt2<double> within 1e-12.
 * - Greedy generation of 64 tokens through the cache equals greedy generation that recomputes
 *   the full context at every step (a d2-like model, L=2, C=128, NH=2, GPT-2 init with a fixed
 *   seed): the same token ids, and the logits of every step within 1e-5.
 * - The contract: limits (batch, max_len, past max_len, bad tokens, no session) throw;
 *   gradients, parameters and the optimizer state are untouched; forward_backward / evaluate
 *   end the session; training after generation is unchanged.
 * - An inference-only model (ModelOptions::training false) plans and allocates no gradients,
 *   AdamW moments or backward workspace, generates and evaluates exactly as a training model,
 *   and refuses the training calls.
 */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "base/rng.h"
#include "model/cpu_model.h"
#include "model/model.h"
#include "model/parameters.h"
#include "tests/kernels/kernel_test_utils.h"
#include "test_fixtures.h"

namespace gpt2 {
namespace {

using testing::random_tokens;

ModelConfig small_config() { return testing::model_config(48, 300, 384, 2, 4, 32); }

// d2-like: GPT-2's head size 64, two layers; a small vocabulary keeps it fast.
ModelConfig d2_like_config() { return testing::model_config(80, 512, 512, 2, 2, 128); }

// Parameters wider than GPT-2's init (weights ~ N(0, 0.2)) so that attention is far from
// uniform and the logits spread.
std::vector<float> wide_random_parameters(const ModelConfig& config, uint64_t seed) {
  const ParameterLayout layout = ParameterLayout::for_config(config);
  std::vector<float> params(layout.total);
  Rng rng(seed);
  for (int t = 0; t < kNumParamTensors; ++t) {
    const bool ln_weight = t == kLn1w || t == kLn2w || t == kLnfw;
    const bool bias = t == kLn1b || t == kQkvb || t == kAttprojb || t == kLn2b || t == kFcb ||
                      t == kFcprojb || t == kLnfb;
    for (size_t i = 0; i < layout.sizes[t]; ++i) {
      const double z = rng.normal();
      params[layout.offsets[t] + i] =
          static_cast<float>(ln_weight ? 1.0 + 0.1 * z : bias ? 0.1 * z : 0.2 * z);
    }
  }
  return params;
}

// max |a - b| over n values, and max |b|.
struct Diff {
  double max_abs = 0, scale = 0;
};
template <typename A, typename B>
Diff diff(const A* a, const B* b, size_t n) {
  Diff d;
  for (size_t i = 0; i < n; ++i) {
    d.max_abs = std::max(d.max_abs, std::fabs(double(a[i]) - double(b[i])));
    d.scale = std::max(d.scale, std::fabs(double(b[i])));
  }
  return d;
}

// Prefill with the first `prompt` tokens of each of B sequences (B,T), then decode the rest
// one position at a time; every step's logits against the full forward's at that position.
// Returns the largest error relative to the logits' scale.
template <typename Real>
double cache_vs_full_forward(const ModelConfig& config, AttentionKind attention,
                             const std::vector<float>& params, int B, int T, int prompt) {
  const int Vp = config.padded_vocab_size;
  CpuGpt2<Real> full(config, B, T, attention), cached(config, B, T, attention);
  std::copy(params.begin(), params.end(), full.params());
  std::copy(params.begin(), params.end(), cached.params());
  const std::vector<int> tokens = random_tokens(size_t(B) * T, config.vocab_size, 77);
  full.forward(tokens.data(), nullptr, B, T);
  const Real* full_logits = full.buffer(kBufLogits);  // (B,T,Vp)

  cached.start_generation(B, T);
  EXPECT_EQ(cached.generation_length(), 0);
  std::vector<int> prefix(size_t(B) * prompt), step(B);
  for (int b = 0; b < B; ++b)
    std::copy(tokens.begin() + size_t(b) * T, tokens.begin() + size_t(b) * T + prompt,
              prefix.begin() + size_t(b) * prompt);
  double worst = 0;
  for (int t = prompt - 1; t < T; ++t) {
    const Real* logits;
    if (t == prompt - 1) {
      logits = cached.prefill(prefix.data(), prompt);
    } else {
      for (int b = 0; b < B; ++b) step[b] = tokens[size_t(b) * T + t];
      logits = cached.decode_step(step.data());
    }
    EXPECT_EQ(cached.generation_length(), t + 1);
    for (int b = 0; b < B; ++b) {
      const Diff d = diff(logits + size_t(b) * Vp, full_logits + (size_t(b) * T + t) * Vp, Vp);
      worst = std::max(worst, d.max_abs / d.scale);
    }
  }
  return worst;
}

TEST(CpuGeneration, DecodeMatchesTheFullForwardAtEveryPosition) {
  const ModelConfig config = small_config();
  const std::vector<float> params = wide_random_parameters(config, 5);
  const int B = 3, T = 41;  // odd T, several sequences
  for (int prompt : {1, 6}) {
    SCOPED_TRACE(prompt);
    const double naive = cache_vs_full_forward<float>(config, AttentionKind::kNaive, params, B, T,
                                                      prompt);
    const double flash = cache_vs_full_forward<float>(config, AttentionKind::kFlash, params, B, T,
                                                      prompt);
    const double exact = cache_vs_full_forward<double>(config, AttentionKind::kFlash, params, B,
                                                       T, prompt);
    std::printf("[ cache    ] prompt %d: max error / max |logit|: naive %.2e, flash %.2e, "
                "double %.2e\n", prompt, naive, flash, exact);
    EXPECT_EQ(naive, 0.0);  // the same row function, the same q, k, v: bit for bit
    EXPECT_LE(flash, 1e-5);
    EXPECT_LE(exact, 1e-12);
  }
}

// Greedy decoding that recomputes: a full forward over the whole sequence at every step.
TEST(CpuGeneration, GreedyWithTheCacheEqualsGreedyRecomputingTheFullContext) {
  // One thread: 64 full forwards are many small parallel regions, which on a shared 2-core
  // machine cost far more than they save; the ops' results do not depend on the thread count
  // (tested with the kernels).
  test::ScopedThreadCount one_thread(1);
  const ModelConfig config = d2_like_config();
  const ParameterLayout layout = ParameterLayout::for_config(config);
  std::vector<float> params(layout.total);
  init_parameters(params.data(), config, 1234);
  constexpr int kPrompt = 5, kNew = 64;
  const int T = kPrompt + kNew - 1;
  const int V = config.vocab_size, Vp = config.padded_vocab_size;
  const std::vector<int> prompt = random_tokens(kPrompt, V, 8);
  auto argmax = [](const float* x, int n) {
    return static_cast<int>(std::max_element(x, x + n) - x);
  };

  // Flash, the default (naive decodes bit for bit, tested above).
  for (AttentionKind attention : {AttentionKind::kFlash}) {
    SCOPED_TRACE(to_string(attention));
    // Recompute: the reference.
    CpuGpt2<float> full(config, 1, T, attention);
    std::copy(params.begin(), params.end(), full.params());
    std::vector<int> recomputed = prompt;
    std::vector<std::vector<float>> recomputed_logits;
    double min_margin = INFINITY;  // top-1 minus top-2 logit: how decisive each step is
    for (int i = 0; i < kNew; ++i) {
      const int length = static_cast<int>(recomputed.size());
      full.forward(recomputed.data(), nullptr, 1, length);
      const float* last = full.buffer(kBufLogits) + size_t(length - 1) * Vp;
      recomputed_logits.emplace_back(last, last + V);
      std::vector<float> sorted(last, last + V);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      min_margin = std::min(min_margin, double(sorted[0] - sorted[1]));
      recomputed.push_back(argmax(last, V));
    }

    // The cache, through the Model interface.
    ModelOptions options;
    options.config = config;
    options.batch_size = 1;
    options.seq_len = T;
    options.attention = attention;
    std::unique_ptr<Model> model = make_cpu_model(options);
    model->set_parameters(params.data());
    model->start_generation(1, T);
    std::vector<int> cached = prompt;
    std::vector<float> logits(V);
    double worst = 0, scale = 0;
    for (int i = 0; i < kNew; ++i) {
      if (i == 0)
        model->prefill(prompt.data(), kPrompt, logits.data());
      else
        model->decode_step(&cached.back(), logits.data());
      const Diff d = diff(logits.data(), recomputed_logits[i].data(), V);
      worst = std::max(worst, d.max_abs);
      scale = std::max(scale, d.scale);
      ASSERT_LE(d.max_abs, 1e-5 * std::max(1.0, d.scale)) << "step " << i;
      cached.push_back(argmax(logits.data(), V));
      ASSERT_EQ(cached.back(), recomputed[kPrompt + i]) << "step " << i;
    }
    std::printf("[ greedy   ] %s: 64 tokens equal; max logit error %.2e (logits up to %.2f, "
                "smallest top-2 margin %.2e)\n",
                to_string(attention), worst, scale, min_margin);
    EXPECT_EQ(cached, recomputed);
    EXPECT_GT(min_margin, 1e-4);  // the comparison of ids is meaningful at this tolerance
  }
}

ModelOptions contract_options() {
  ModelOptions options;
  options.config = small_config();
  options.batch_size = 3;
  options.seq_len = 12;
  options.attention = AttentionKind::kFlash;
  return options;
}

TEST(CpuGeneration, LimitsAreCheckedAndNothingIsComputedPastThem) {
  const ModelOptions options = contract_options();
  std::unique_ptr<Model> model = make_cpu_model(options);
  const std::vector<float> params = wide_random_parameters(options.config, 3);
  model->set_parameters(params.data());
  const int V = options.config.vocab_size;
  std::vector<int> tokens = random_tokens(3 * 12, V, 4);
  std::vector<float> logits(3 * V);

  EXPECT_EQ(model->generation_length(), -1);
  EXPECT_THROW(model->prefill(tokens.data(), 2, logits.data()), Error);  // no session
  EXPECT_THROW(model->decode_step(tokens.data(), logits.data()), Error);
  EXPECT_THROW(model->start_generation(4, 8), Error);   // batch > B
  EXPECT_THROW(model->start_generation(0, 8), Error);
  EXPECT_THROW(model->start_generation(2, 13), Error);  // max_len > T
  EXPECT_THROW(model->start_generation(2, 0), Error);

  model->start_generation(2, 4);
  EXPECT_THROW(model->decode_step(tokens.data(), logits.data()), Error);  // before prefill
  EXPECT_THROW(model->prefill(tokens.data(), 5, logits.data()), Error);   // > max_len
  std::vector<int> bad = {1, V};
  EXPECT_THROW(model->prefill(bad.data(), 1, logits.data()), Error);
  model->prefill(tokens.data(), 3, logits.data());
  EXPECT_EQ(model->generation_length(), 3);
  model->decode_step(tokens.data(), logits.data());
  EXPECT_EQ(model->generation_length(), 4);
  const std::vector<float> at_max(logits.begin(), logits.begin() + 2 * V);
  std::fill(logits.begin(), logits.end(), -1.0f);
  EXPECT_THROW(model->decode_step(tokens.data(), logits.data()), Error);  // past max_len
  EXPECT_EQ(model->generation_length(), 4);
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return x == -1.0f; }));
  // A new prefill restarts the sequences (the sliding-window use).
  model->prefill(tokens.data() + 2, 4, logits.data());
  EXPECT_EQ(model->generation_length(), 4);
}

TEST(CpuGeneration, LeavesTrainingStateAloneAndTrainingEndsTheSession) {
  const ModelOptions options = contract_options();
  const std::vector<float> params = wide_random_parameters(options.config, 6);
  const size_t n = ParameterLayout::for_config(options.config).total;
  const int V = options.config.vocab_size, B = 3, T = 12;
  const std::vector<int> inputs = random_tokens(B * T, V, 10);
  const std::vector<int> targets = random_tokens(B * T, V, 11);

  // a: one training step; b: the same with a generation session in between.
  std::unique_ptr<Model> a = make_cpu_model(options), b = make_cpu_model(options);
  a->set_parameters(params.data());
  b->set_parameters(params.data());
  AdamWHyper hyper;
  const float loss_a = a->forward_backward(inputs.data(), targets.data(), 1.0f);
  const float loss_b = b->forward_backward(inputs.data(), targets.data(), 1.0f);
  const CpuGpt2<float>& gb = static_cast<CpuModel&>(*b).gpt2();
  const std::vector<float> grads_before(gb.grads(), gb.grads() + n);
  std::vector<float> logits(B * V);
  b->start_generation(B, T);
  b->prefill(inputs.data(), 4, logits.data());
  b->decode_step(inputs.data(), logits.data());
  EXPECT_EQ(std::vector<float>(gb.grads(), gb.grads() + n), grads_before);
  std::vector<float> params_after(n);
  b->get_parameters(params_after.data());
  EXPECT_EQ(params_after, params);

  a->adamw_step(hyper, 1, 1.0f);
  b->adamw_step(hyper, 1, 1.0f);
  EXPECT_EQ(loss_a, loss_b);
  std::vector<float> pa(n), pb(n);
  a->get_parameters(pa.data());
  b->get_parameters(pb.data());
  EXPECT_EQ(pa, pb);
  // The next training step is the same too, and it ends the session.
  EXPECT_EQ(a->forward_backward(inputs.data(), targets.data(), 1.0f),
            b->forward_backward(inputs.data(), targets.data(), 1.0f));
  EXPECT_EQ(b->generation_length(), -1);
  EXPECT_THROW(b->decode_step(inputs.data(), logits.data()), Error);
  b->start_generation(1, 4);
  b->prefill(inputs.data(), 2, logits.data());
  b->evaluate(inputs.data(), targets.data());
  EXPECT_EQ(b->generation_length(), -1);
}

TEST(CpuGeneration, InferenceOnlyModelGeneratesTheSameWithoutTrainingMemory) {
  ModelOptions options = contract_options();
  const MemoryPlan training_plan = plan_model_memory(options, DeviceKind::kCpu);
  options.training = false;
  const MemoryPlan inference_plan = plan_model_memory(options, DeviceKind::kCpu);
  const size_t param_bytes = ParameterLayout::for_config(options.config).total * sizeof(float);
  for (const MemoryItem& item : inference_plan.items) {
    EXPECT_NE(item.group, "gradients") << item.name;
    EXPECT_NE(item.group, "optimizer") << item.name;
    EXPECT_EQ(item.name.find("dlogits"), std::string::npos) << item.name;
  }
  EXPECT_LT(inference_plan.total() + 3 * param_bytes, training_plan.total());

  const std::vector<float> params = wide_random_parameters(options.config, 12);
  std::unique_ptr<Model> inference = make_cpu_model(options);
  options.training = true;
  std::unique_ptr<Model> trainable = make_cpu_model(options);
  const int V = options.config.vocab_size, B = 3, T = 12;
  const std::vector<int> tokens = random_tokens(B * T, V, 13);
  std::vector<float> a(B * V), b(B * V);
  for (Model* model : {inference.get(), trainable.get()}) {
    model->set_parameters(params.data());
    model->start_generation(B, T);
  }
  inference->prefill(tokens.data(), 5, a.data());
  trainable->prefill(tokens.data(), 5, b.data());
  EXPECT_EQ(a, b);
  inference->decode_step(tokens.data(), a.data());
  trainable->decode_step(tokens.data(), b.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(inference->evaluate(tokens.data(), tokens.data()),
            trainable->evaluate(tokens.data(), tokens.data()));

  inference->zero_grad();  // nothing to zero: allowed
  EXPECT_THROW(inference->forward_backward(tokens.data(), tokens.data(), 1.0f), Error);
  EXPECT_THROW(inference->grad_norm(), Error);
  EXPECT_THROW(inference->adamw_step(AdamWHyper{}, 1, 1.0f), Error);
  std::vector<float> m(ParameterLayout::for_config(options.config).total), v(m.size());
  EXPECT_THROW(inference->get_optimizer_state(m.data(), v.data()), Error);
  EXPECT_THROW(inference->set_optimizer_state(m.data(), v.data()), Error);
  EXPECT_FALSE(static_cast<CpuModel&>(*inference).gpt2().training());
}

}  // namespace
}  // namespace gpt2
