// The CUDA model's generation session (model.h) through its key/value cache, against full
// forwards and the CPU model.
//
// - Cached logits equal the full forward's at every position: B=3 sequences of 301 tokens
//   (different prompts of 37, then teacher-forced decode steps across the 128-position chunks
//   of decode attention), head sizes 64 and 128, both attention kinds, fp32 and bf16. The
//   oracle is the CPU model's fp32 full forward over the whole (B,301) tokens (causal, so
//   position t's logits are those of a forward over t+1 tokens). fp32: within 1e-4 of the
//   logits' scale. bf16: the decode's error is at most twice that of the CUDA model's own bf16
//   full forward at the same positions (a prefill of t+1 tokens, which runs the training
//   forward's blocks), plus 5e-3 of the scale (FlashAttention's rule, applied to logits).
// - 64 greedy tokens past the 128-position chunk (a prompt of 71) equal the CPU model's in fp32,
//   two sequences with different prompts, through the session and through generate().
// - The contract: limits throw and compute nothing; a second prefill restarts the sequences;
//   generation between a backward and its AdamW step changes nothing of the step (fp32,
//   bitwise); training ends the session.
// - An inference-only CUDA model (ModelOptions::training false, as gpt2-generate builds)
//   plans no gradients or optimizer state, gives the same logits as a training one in fp32 and
//   bf16, and refuses the training calls.
// A small model (L=2, C=128, V=250 padded to 256). Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "gpu/gpu_test_util.h"
#include "model/cpu_model.h"
#include "model/model.h"
#include "model/parameters.h"
#include "inference/generation.h"
#include "kernels/gpu/attention_hopper.cuh"

namespace gpt2::gpu::test {
namespace {

int argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

/// small_model_config() with room for sessions past the 128-position chunks.
ModelConfig long_context_config(int num_heads) {
  ModelConfig config = small_model_config();
  config.max_seq_len = 320;
  config.num_heads = num_heads;  // HS = 128 / num_heads
  return config;
}

/// max |got - want| / max |want| over n values.
double relative_max_error(const float* got, const float* want, int n) {
  double err = 0, scale = 0;
  for (int i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return err / scale;
}

TEST(CudaGeneration, CachedLogitsEqualTheFullForwardAtEveryPosition) {
  GPT2_REQUIRE_GPU();
  constexpr int B = 3, kTotal = 301, kPrompt = 37;
  for (int num_heads : {2, 1}) {
    const ModelConfig config = long_context_config(num_heads);
    const int V = config.vocab_size, Vp = config.padded_vocab_size;
    SCOPED_TRACE(str_cat("HS=", config.head_size()));
    std::vector<float> params(ParameterLayout::for_config(config).total);
    init_parameters(params.data(), config, 31);
    for (float& p : params) p *= 3.0f;  // attention far from uniform
    const std::vector<int> tokens = random_ints(B * kTotal, V, 32);  // (B, kTotal)
    // The fp32 oracle: every position's logits from one CPU full forward.
    CpuGpt2<float> oracle(config, B, kTotal, AttentionKind::kFlash);
    std::copy(params.begin(), params.end(), oracle.params());
    oracle.forward(tokens.data(), nullptr, B, kTotal);
    const float* full_logits = oracle.buffer(kBufLogits);  // (B, kTotal, Vp)
    auto oracle_row = [&](int b, int t) { return full_logits + (size_t(b) * kTotal + t) * Vp; };

    for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
      for (AttentionKind attention : {AttentionKind::kFlash, AttentionKind::kNaive}) {
        SCOPED_TRACE(str_cat(to_string(precision), " ", to_string(attention)));
        const ModelOptions options{config, B, kTotal, attention, precision};
        std::unique_ptr<Model> cached = make_cuda_model(options);
        std::unique_ptr<Model> full = make_cuda_model(options);
        cached->set_parameters(params.data());
        full->set_parameters(params.data());
        cached->start_generation(B, kTotal);
        std::vector<float> logits(B * V), full_forward(B * V);
        std::vector<int> prefix, step(B);
        double worst_cached = 0, worst_full = 0, worst_cached_vs_full = 0;
        for (int t = kPrompt - 1; t < kTotal; ++t) {
          // The cached session: a prefill of kPrompt, then one decode step per position.
          if (t == kPrompt - 1) {
            for (int b = 0; b < B; ++b)
              prefix.insert(prefix.end(), tokens.begin() + size_t(b) * kTotal,
                            tokens.begin() + size_t(b) * kTotal + kPrompt);
            cached->prefill(prefix.data(), kPrompt, logits.data());
          } else {
            for (int b = 0; b < B; ++b) step[b] = tokens[size_t(b) * kTotal + t];
            cached->decode_step(step.data(), logits.data());
          }
          ASSERT_EQ(cached->generation_length(), t + 1);
          // The CUDA model's own full forward over tokens [0, t] of each sequence.
          std::vector<int> window;
          for (int b = 0; b < B; ++b)
            window.insert(window.end(), tokens.begin() + size_t(b) * kTotal,
                          tokens.begin() + size_t(b) * kTotal + t + 1);
          full->start_generation(B, t + 1);
          full->prefill(window.data(), t + 1, full_forward.data());
          for (int b = 0; b < B; ++b) {
            const float* got = logits.data() + size_t(b) * V;
            const float* reference = full_forward.data() + size_t(b) * V;
            worst_cached = std::max(worst_cached, relative_max_error(got, oracle_row(b, t), V));
            worst_full = std::max(worst_full, relative_max_error(reference, oracle_row(b, t), V));
            worst_cached_vs_full =
                std::max(worst_cached_vs_full, relative_max_error(got, reference, V));
          }
        }
        std::printf("[ kv cache ] HS=%d %s %s: max error / logit scale over %d positions x %d: "
                    "cached %.2e, full forward %.2e, cached vs full %.2e\n",
                    config.head_size(), to_string(precision), to_string(attention),
                    kTotal - kPrompt + 1, B, worst_cached, worst_full, worst_cached_vs_full);
        if (precision == Precision::kFp32) {
          EXPECT_LE(worst_cached, 1e-4);
          EXPECT_LE(worst_full, 1e-4);
          EXPECT_LE(worst_cached_vs_full, 1e-4);
        } else {
          // bf16: no worse than twice the full forward's own error (seen on an H100: 5.2e-2 to
          // 5.5e-2 for the cache, 4.7e-2 to 8.5e-2 for the full forward), and bf16-sized at all.
          EXPECT_LE(worst_cached, 2 * worst_full + 5e-3);
          EXPECT_LE(worst_cached, 1e-1);
        }
      }
    }
  }
}

TEST(CudaGeneration, GreedyTokensAndLogitsEqualTheCpuModelInFp32) {
  GPT2_REQUIRE_GPU();
  const ModelConfig config = long_context_config(2);
  const int V = config.vocab_size;
  constexpr int kBatch = 2, kPrompt = 71, kNew = 64;  // 134 tokens: two decode chunks
  constexpr int kMaxLen = kPrompt + kNew - 1;
  std::vector<float> params(ParameterLayout::for_config(config).total);
  init_parameters(params.data(), config, 21);
  for (float& p : params) p *= 5.0f;  // decisive logits: greedy ties are not a question
  const std::vector<int> prompts = random_ints(kBatch * kPrompt, V, 22);

  for (AttentionKind attention : {AttentionKind::kFlash, AttentionKind::kNaive}) {
    SCOPED_TRACE(to_string(attention));
    const ModelOptions options{config, kBatch, kMaxLen, attention, Precision::kFp32};
    std::unique_ptr<Model> gpu = make_cuda_model(options);
    std::unique_ptr<Model> cpu = make_cpu_model(options);
    for (Model* model : {gpu.get(), cpu.get()}) {
      model->set_parameters(params.data());
      model->start_generation(kBatch, kMaxLen);
    }
    std::vector<float> gpu_logits(kBatch * V), cpu_logits(kBatch * V);
    std::vector<int> gpu_next(kBatch), cpu_next(kBatch);
    double worst = 0;
    for (int step = 0; step < kNew; ++step) {
      if (step == 0) {
        gpu->prefill(prompts.data(), kPrompt, gpu_logits.data());
        cpu->prefill(prompts.data(), kPrompt, cpu_logits.data());
      } else {
        gpu->decode_step(gpu_next.data(), gpu_logits.data());
        cpu->decode_step(cpu_next.data(), cpu_logits.data());
      }
      EXPECT_EQ(gpu->generation_length(), kPrompt + step);
      double scale = 0, err = 0;
      for (int i = 0; i < kBatch * V; ++i) {
        scale = std::max(scale, std::fabs(double(cpu_logits[i])));
        err = std::max(err, std::fabs(double(gpu_logits[i]) - cpu_logits[i]));
      }
      worst = std::max(worst, err / scale);
      ASSERT_LE(err, 1e-4 * scale) << "step " << step;
      for (int b = 0; b < kBatch; ++b) {
        gpu_next[b] = argmax(gpu_logits.data() + b * V, V);
        cpu_next[b] = argmax(cpu_logits.data() + b * V, V);
      }
      ASSERT_EQ(gpu_next, cpu_next) << "step " << step;
    }
    std::printf("[ generate ] %s fp32: %d greedy tokens x %d sequences equal; logits max error "
                "%.2e of their scale\n", to_string(attention), kNew, kBatch, worst);
    EXPECT_THROW(gpu->decode_step(gpu_next.data(), gpu_logits.data()), Error);  // at max_len

    // The same through generate(), as gpt2-generate runs it.
    GenerationOptions generation;
    generation.max_new_tokens = kNew;
    generation.sampling.greedy = true;
    const std::vector<int> prompt(prompts.begin(), prompts.begin() + kPrompt);
    std::vector<Rng> gpu_rngs = sequence_rngs(1, kBatch), cpu_rngs = sequence_rngs(1, kBatch);
    EXPECT_EQ(generate(*gpu, prompt, generation, gpu_rngs),
              generate(*cpu, prompt, generation, cpu_rngs));
  }
}

TEST(CudaGeneration, LimitsAreCheckedAndNothingIsComputedPastThem) {
  GPT2_REQUIRE_GPU();
  const ModelConfig config = small_model_config();
  const int V = config.vocab_size;
  std::vector<float> params(ParameterLayout::for_config(config).total);
  init_parameters(params.data(), config, 25);
  std::unique_ptr<Model> model =
      make_cuda_model(ModelOptions{config, 3, 12, AttentionKind::kFlash, Precision::kBf16});
  model->set_parameters(params.data());
  const std::vector<int> tokens = random_ints(3 * 12, V, 26);
  std::vector<float> logits(3 * V);

  EXPECT_EQ(model->generation_length(), -1);
  EXPECT_THROW(model->prefill(tokens.data(), 2, logits.data()), Error);  // no session
  EXPECT_THROW(model->decode_step(tokens.data(), logits.data()), Error);
  EXPECT_THROW(model->start_generation(4, 8), Error);   // batch > B
  EXPECT_THROW(model->start_generation(2, 13), Error);  // max_len > T
  model->start_generation(2, 4);
  EXPECT_THROW(model->decode_step(tokens.data(), logits.data()), Error);  // before prefill
  EXPECT_THROW(model->prefill(tokens.data(), 5, logits.data()), Error);   // > max_len
  const std::vector<int> bad = {1, V};
  EXPECT_THROW(model->prefill(bad.data(), 1, logits.data()), Error);
  EXPECT_EQ(model->generation_length(), 0);  // a refused prefill leaves the session as it was
  model->prefill(tokens.data(), 3, logits.data());
  EXPECT_EQ(model->generation_length(), 3);
  const std::vector<int> bad_step = {V, 1};
  EXPECT_THROW(model->decode_step(bad_step.data(), logits.data()), Error);
  EXPECT_EQ(model->generation_length(), 3);
  model->decode_step(tokens.data(), logits.data());
  EXPECT_EQ(model->generation_length(), 4);
  std::fill(logits.begin(), logits.end(), -1.0f);
  EXPECT_THROW(model->decode_step(tokens.data(), logits.data()), Error);  // past max_len
  EXPECT_EQ(model->generation_length(), 4);
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return x == -1.0f; }));

  // A new prefill restarts the sequences (the sliding-window use): its logits and the next
  // step's equal those of a fresh session over the same tokens.
  std::vector<float> again(2 * V), fresh(2 * V);
  model->prefill(tokens.data() + 2, 3, again.data());
  model->decode_step(tokens.data() + 8, again.data());
  std::unique_ptr<Model> other =
      make_cuda_model(ModelOptions{config, 3, 12, AttentionKind::kFlash, Precision::kBf16});
  other->set_parameters(params.data());
  other->start_generation(2, 4);
  other->prefill(tokens.data() + 2, 3, fresh.data());
  other->decode_step(tokens.data() + 8, fresh.data());
  EXPECT_EQ(again, fresh);
}

TEST(CudaGeneration, LeavesTheTrainingStepAloneAndTrainingEndsTheSession) {
  GPT2_REQUIRE_GPU();
  const ModelConfig config = small_model_config();
  const int V = config.vocab_size, B = 3, T = 40;
  std::vector<float> params(ParameterLayout::for_config(config).total);
  init_parameters(params.data(), config, 27);
  const std::vector<int> inputs = random_ints(B * T, V, 28), targets = random_ints(B * T, V, 29);
  // fp32: deterministic backward, so the two models can be compared bit for bit.
  const ModelOptions options{config, B, T, AttentionKind::kFlash, Precision::kFp32};
  std::unique_ptr<Model> a = make_cuda_model(options), b = make_cuda_model(options);
  a->set_parameters(params.data());
  b->set_parameters(params.data());
  EXPECT_EQ(a->forward_backward(inputs.data(), targets.data(), 1.0f),
            b->forward_backward(inputs.data(), targets.data(), 1.0f));
  std::vector<float> logits(B * V);
  b->start_generation(B, T);
  b->prefill(inputs.data(), 30, logits.data());
  for (int i = 0; i < 5; ++i) b->decode_step(inputs.data() + i * B, logits.data());
  AdamWHyper hyper;
  a->adamw_step(hyper, 1, 1.0f);
  b->adamw_step(hyper, 1, 1.0f);
  std::vector<float> pa(params.size()), pb(params.size());
  a->get_parameters(pa.data());
  b->get_parameters(pb.data());
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(a->forward_backward(inputs.data(), targets.data(), 1.0f),
            b->forward_backward(inputs.data(), targets.data(), 1.0f));
  EXPECT_EQ(b->generation_length(), -1);
  EXPECT_THROW(b->decode_step(inputs.data(), logits.data()), Error);
}

TEST(CudaGeneration, InferenceOnlyModelMatchesATrainingModel) {
  GPT2_REQUIRE_GPU();
  const ModelConfig config = small_model_config();
  const int V = config.vocab_size;
  std::vector<float> params(ParameterLayout::for_config(config).total);
  init_parameters(params.data(), config, 23);
  const std::vector<int> prompts = random_ints(2 * 7, V, 24);
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    SCOPED_TRACE(to_string(precision));
    ModelOptions options{config, 2, 16, AttentionKind::kFlash, precision};
    const MemoryPlan training_plan = plan_model_memory(options, DeviceKind::kCuda);
    std::unique_ptr<Model> trainable = make_cuda_model(options);
    options.training = false;
    const MemoryPlan inference_plan = plan_model_memory(options, DeviceKind::kCuda);
    std::unique_ptr<Model> inference = make_cuda_model(options);
    for (const MemoryItem& item : inference_plan.items) {
      if (item.group == "gradients" || item.group == "optimizer") {
        EXPECT_EQ(item.bytes, 0u) << item.name;
      }
      // Without a backward the attention workspace is the forward's: at most a work counter.
      if (item.name.rfind("attention scratch", 0) == 0) {
        EXPECT_LE(item.bytes, kHopperForwardWorkspaceBytes) << item.name;
      }
    }
    EXPECT_LT(inference_plan.total(), training_plan.total());

    std::vector<float> a(2 * V), b(2 * V);
    for (Model* model : {inference.get(), trainable.get()}) {
      model->set_parameters(params.data());
      model->start_generation(2, 16);
    }
    inference->prefill(prompts.data(), 7, a.data());
    trainable->prefill(prompts.data(), 7, b.data());
    EXPECT_EQ(a, b);
    const std::vector<int> next = {3, 4};
    inference->decode_step(next.data(), a.data());
    trainable->decode_step(next.data(), b.data());
    EXPECT_EQ(a, b);
    inference->zero_grad();
    EXPECT_THROW(inference->forward_backward(prompts.data(), prompts.data(), 1.0f), Error);
    EXPECT_THROW(inference->grad_norm(), Error);
    EXPECT_THROW(inference->adamw_step(AdamWHyper{}, 1, 1.0f), Error);
  }
}

}  // namespace
}  // namespace gpt2::gpu::test
