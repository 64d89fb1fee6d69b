// The CUDA model's generation session (model.h) against the CPU model's, in fp32.
//
// The CUDA backend recomputes (a full forward over the sequences at every step; the GPU
// key/value cache is a follow-up), the CPU one decodes through its cache; both must give the
// same greedy tokens and logits within fp32 summation-order error. A small model (L=2, C=128,
// NH=2, HS=64, V=250 padded to 256), two sequences with different prompts driven through
// start_generation / prefill / decode_step, then generate() with greedy sampling; both
// attention kinds. An inference-only CUDA model (ModelOptions::training false, as
// gpt2-generate builds) plans no gradients or optimizer state, gives the same logits as a
// training one in fp32 and bf16, and refuses the training calls. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "model/cpu_model.h"
#include "model/model.h"
#include "model/parameters.h"
#include "train/generation.h"

namespace gpt2::gpu::test {
namespace {

int argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

TEST(CudaGeneration, GreedyTokensAndLogitsEqualTheCpuModelInFp32) {
  GPT2_REQUIRE_GPU();
  const ModelConfig config = small_model_config();
  const int V = config.vocab_size;
  constexpr int kBatch = 2, kPrompt = 5, kNew = 40;
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
    EXPECT_THROW(inference->adamw_step(cpu::AdamWHyper{}, 1, 1.0f), Error);
  }
}

}  // namespace
}  // namespace gpt2::gpu::test
