// The CUDA GPT-2 backend against the CPU reference model, and its training behaviour.
//
// A small model (L=2, C=128, NH=2, HS=64, V=250 padded to 256, T=37: odd on purpose) takes one
// forward+backward on the GPU and on the CPU from the same parameters and tokens; the loss, the
// residual-stream gradient and every parameter gradient tensor are compared. fp32 on the GPU is
// exact arithmetic up to summation order (tight tolerances); bf16 stores activations, weights and
// gradients in bf16 (relative L2 error per tensor at the percent level). The classifier in chunks
// of rows gives the same losses and gradients as in one chunk, and its plan item shrinks to the
// chunk (checked without a GPU).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/dataloader.h"
#include "data/paths.h"
#include "gpu/gpu_test_util.h"
#include "model/cpu_model.h"
#include "kernels/gpu/attention.cuh"
#include "model/cuda_model.h"
#include "model/parameters.h"

namespace gpt2::gpu::test {
namespace {

std::unique_ptr<CudaModelBase> make_gpu_model(const ModelOptions& options) {
  std::unique_ptr<Model> model = make_cuda_model(options);
  auto* cuda = dynamic_cast<CudaModelBase*>(model.get());
  GPT2_CHECK(cuda != nullptr);
  model.release();
  return std::unique_ptr<CudaModelBase>(cuda);
}

struct StepCase {
  Precision precision;
  AttentionKind attention;
  FlashKernelChoice flash_kernel = FlashKernelChoice::kAuto;
};

class CudaModelStepTest : public ::testing::TestWithParam<StepCase> {};

TEST_P(CudaModelStepTest, OneStepMatchesCpuModel) {
  GPT2_REQUIRE_GPU();
  const StepCase c = GetParam();
  if (c.flash_kernel == FlashKernelChoice::kHopper) {
    std::string why;
    if (!attention_hopper_supported(c.precision == Precision::kBf16, 64, &why))
      GTEST_SKIP() << "flash-hopper does not run here: " << why;
  }
  const ModelConfig config = small_model_config();
  const int B = 2, T = 37;
  ModelOptions options{config, B, T, c.attention, c.precision, c.flash_kernel};
  const ParameterLayout layout = ParameterLayout::for_config(config);
  std::vector<float> params(layout.total);
  init_parameters(params.data(), config, 42);
  const bool bf16_storage = c.precision == Precision::kBf16;
  // Both models start from the same (storage-rounded) parameters.
  if (bf16_storage) params = round_through<bf16>(params);
  const std::vector<int> inputs = random_ints(B * T, config.vocab_size, 7);
  const std::vector<int> targets = random_ints(B * T, config.vocab_size, 8);

  CpuGpt2<float> cpu(config, B, T, c.attention);
  std::copy(params.begin(), params.end(), cpu.params());
  const float cpu_loss = cpu.forward(inputs.data(), targets.data());
  cpu.backward(1.0f);

  auto gpu = make_gpu_model(options);
  gpu->set_parameters(params.data());
  gpu->zero_grad();
  const float gpu_loss = gpu->forward_backward(inputs.data(), targets.data(), 1.0f);
  std::vector<float> grads(layout.total);
  gpu->get_gradients(grads.data());
  std::vector<float> dresidual(static_cast<size_t>(B) * T * config.channels);
  gpu->get_residual_gradient(dresidual.data());

  const double loss_tol = bf16_storage ? 1e-2 : 1e-5;
  const double grad_tol = bf16_storage ? 5e-2 : 1e-4;
  std::printf("[ model    ] %s %s (%s) loss gpu %.7f cpu %.7f\n", to_string(c.precision),
              to_string(c.attention), to_string(c.flash_kernel), gpu_loss, cpu_loss);
  EXPECT_NEAR(gpu_loss, cpu_loss, loss_tol * std::fabs(cpu_loss));
  const double dres_err =
      rel_l2(dresidual.data(), cpu.buffer(kBufDResidual), dresidual.size());
  std::printf("[ model    ]   dresidual rel-L2 %.2e\n", dres_err);
  EXPECT_LE(dres_err, grad_tol);
  for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
    const size_t offset = layout.offsets[tensor], n = layout.sizes[tensor];
    const double err = rel_l2(grads.data() + offset, cpu.grads() + offset, n);
    bool finite = true;
    for (size_t i = 0; i < n; ++i) finite = finite && std::isfinite(grads[offset + i]);
    std::printf("[ model    ]   d%-9s rel-L2 %.2e\n", ParameterLayout::name(tensor), err);
    EXPECT_TRUE(finite) << ParameterLayout::name(tensor);
    EXPECT_LE(err, grad_tol) << ParameterLayout::name(tensor);
  }
}

INSTANTIATE_TEST_SUITE_P(
    PrecisionAndAttention, CudaModelStepTest,
    ::testing::Values(StepCase{Precision::kFp32, AttentionKind::kNaive},
                      StepCase{Precision::kFp32, AttentionKind::kFlash},
                      StepCase{Precision::kBf16, AttentionKind::kNaive},
                      StepCase{Precision::kBf16, AttentionKind::kFlash, FlashKernelChoice::kPortable},
                      StepCase{Precision::kBf16, AttentionKind::kFlash, FlashKernelChoice::kHopper}),
    [](const ::testing::TestParamInfo<StepCase>& step_info) {
      const StepCase& c = step_info.param;
      return str_cat(to_string(c.precision), "_", to_string(c.attention),
                     c.attention == AttentionKind::kFlash ? str_cat("_", to_string(c.flash_kernel))
                                                          : std::string());
    });

// The llm.c lesson: parameter gradients accumulate (a second backward doubles them) while
// activation gradients are overwritten (the residual-stream gradient is unchanged).
TEST(CudaModel, BackwardTwiceDoublesParameterGradientsOnly) {
  GPT2_REQUIRE_GPU();
  const ModelConfig config = small_model_config();
  const int B = 2, T = 37;
  const ParameterLayout layout = ParameterLayout::for_config(config);
  std::vector<float> params(layout.total);
  init_parameters(params.data(), config, 3);
  const std::vector<int> inputs = random_ints(B * T, config.vocab_size, 11);
  const std::vector<int> targets = random_ints(B * T, config.vocab_size, 12);
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    for (AttentionKind attention : {AttentionKind::kNaive, AttentionKind::kFlash}) {
      SCOPED_TRACE(str_cat(to_string(precision), " ", to_string(attention)));
      auto gpu = make_gpu_model(ModelOptions{config, B, T, attention, precision});
      gpu->set_parameters(params.data());
      gpu->zero_grad();
      const float loss1 = gpu->forward_backward(inputs.data(), targets.data(), 1.0f);
      std::vector<float> once(layout.total), twice(layout.total);
      std::vector<float> dres_once(static_cast<size_t>(B) * T * config.channels);
      std::vector<float> dres_twice(dres_once.size());
      gpu->get_gradients(once.data());
      gpu->get_residual_gradient(dres_once.data());
      const float loss2 = gpu->forward_backward(inputs.data(), targets.data(), 1.0f);
      gpu->get_gradients(twice.data());
      gpu->get_residual_gradient(dres_twice.data());
      EXPECT_EQ(loss1, loss2);
      // One accumulation per backward doubles exactly: round(x + round(x)) == 2 round(x), in
      // fp32 and in bf16, so those tensors must be bit-exact doubles. wte takes two per backward
      // (the classifier GEMM, then the encoder's sums), so it doubles only up to roundings of
      // partial sums that may cancel (cuBLAS also rounds its bf16 product before the +=, see
      // matmul.cuh); bf16 flash adds dQ with atomics, so its second backward differs in the last
      // bits too. Those tensors are held to a relative L2 error: rounding gives ~1e-3, while a
      // gradient that leaked the first backward's activation gradients would be off by ~1.
      const bool exact = precision == Precision::kFp32;
      const bool reordered = !exact && attention == AttentionKind::kFlash;
      for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
        const size_t offset = layout.offsets[tensor], n = layout.sizes[tensor];
        std::vector<float> doubled(n);
        for (size_t i = 0; i < n; ++i) doubled[i] = 2.0f * once[offset + i];
        if (tensor == kWte || reordered) {
          const double err = rel_l2(twice.data() + offset, doubled.data(), n);
          EXPECT_LE(err, exact ? 1e-6 : 1e-2) << ParameterLayout::name(tensor);
        } else {
          EXPECT_TRUE(std::equal(doubled.begin(), doubled.end(), twice.begin() + offset))
              << ParameterLayout::name(tensor) << " did not double exactly";
        }
      }
      const double dres_change = rel_l2(dres_twice.data(), dres_once.data(), dres_once.size());
      const bool deterministic = exact || attention == AttentionKind::kNaive;
      if (deterministic) {
        EXPECT_EQ(dres_twice, dres_once);
      } else {
        EXPECT_LE(dres_change, 1e-2);  // equal up to dQ's atomic ordering; never doubled
      }
    }
  }
}

// 20 bf16 steps on the embedded data lower the loss with each attention, and the two loss
// curves agree within bf16 tolerance.
TEST(CudaModel, TwentyStepsLowerTheLossAndCurvesAgree) {
  GPT2_REQUIRE_GPU();
  const ModelConfig config = model_config_from_preset("d2", 256);
  const int B = 8, T = 256, kSteps = 20;
  const ParameterLayout layout = ParameterLayout::for_config(config);
  std::vector<float> params(layout.total);
  init_parameters(params.data(), config, 1337);
  std::vector<std::vector<float>> curves;
  for (AttentionKind attention : {AttentionKind::kNaive, AttentionKind::kFlash}) {
    DataLoaderOptions loader_options;
    loader_options.pattern = default_train_pattern();
    loader_options.batch_size = B;
    loader_options.seq_len = T;
    loader_options.vocab_size = config.vocab_size;
    loader_options.shuffle = true;
    loader_options.seed = 1;
    DataLoader loader(loader_options);
    auto gpu = make_gpu_model(ModelOptions{config, B, T, attention, Precision::kBf16});
    gpu->set_parameters(params.data());
    std::vector<int> inputs(B * T), targets(B * T);
    std::vector<float> curve;
    AdamWHyper hyper;
    hyper.lr = 1e-3f;
    hyper.weight_decay = 0.1f;
    for (int step = 1; step <= kSteps; ++step) {
      loader.next_batch(inputs.data(), targets.data());
      gpu->zero_grad();
      curve.push_back(gpu->forward_backward(inputs.data(), targets.data(), 1.0f));
      const float norm = gpu->grad_norm();
      gpu->adamw_step(hyper, step, norm > 1.0f ? 1.0f / norm : 1.0f);
    }
    std::printf("[ model    ] %s losses:", to_string(attention));
    for (float l : curve) std::printf(" %.4f", l);
    std::printf("\n");
    EXPECT_LT(curve.back(), curve.front() - 1.0f) << to_string(attention);
    curves.push_back(curve);
  }
  for (int i = 0; i < kSteps; ++i)
    EXPECT_NEAR(curves[1][i], curves[0][i], 2e-2 * curves[0][i]) << "step " << i + 1;
}

// bf16 training with the Hopper flash kernel in deterministic mode repeats bit for bit (what a
// GPU resume needs): two models from the same start give identical losses and parameters.
TEST(CudaModel, HopperDeterministicTrainingRepeatsBitForBit) {
  GPT2_REQUIRE_GPU();
  std::string why;
  if (!attention_hopper_supported(true, 64, &why))
    GTEST_SKIP() << "flash-hopper does not run here: " << why;
  ModelConfig config = small_model_config();
  config.max_seq_len = 512;
  const int B = 2, T = 300, kSteps = 3;
  const ParameterLayout layout = ParameterLayout::for_config(config);
  std::vector<float> params(layout.total);
  init_parameters(params.data(), config, 21);
  std::vector<std::vector<float>> finals;
  std::vector<std::vector<float>> losses;
  for (int run = 0; run < 2; ++run) {
    ModelOptions options{config, B, T, AttentionKind::kFlash, Precision::kBf16,
                         FlashKernelChoice::kHopper, /*deterministic_attention=*/true};
    auto gpu = make_gpu_model(options);
    gpu->set_parameters(params.data());
    AdamWHyper hyper;
    hyper.lr = 1e-3f;
    std::vector<float> curve;
    for (int step = 1; step <= kSteps; ++step) {
      const std::vector<int> inputs = random_ints(B * T, config.vocab_size, 100 + step);
      const std::vector<int> targets = random_ints(B * T, config.vocab_size, 200 + step);
      gpu->zero_grad();
      curve.push_back(gpu->forward_backward(inputs.data(), targets.data(), 1.0f));
      gpu->adamw_step(hyper, step, 1.0f / std::max(1.0f, gpu->grad_norm()));
    }
    std::vector<float> final_params(layout.total);
    gpu->get_parameters(final_params.data());
    finals.push_back(std::move(final_params));
    losses.push_back(std::move(curve));
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(finals[0], finals[1]);
}

// The plan needs no GPU: --recompute fc holds one layer's fch and fch_gelu; at d12, T=65536,
// B=1 that is 8.25 GiB less.
TEST(CudaModelPlan, RecomputeFcHoldsOneLayersFcActivations) {
  const ModelConfig config = model_config_from_preset("d12", 65536);
  ModelOptions options{config, 1, 65536, AttentionKind::kFlash, Precision::kBf16,
                       FlashKernelChoice::kPortable};
  const size_t kept = plan_cuda_model_memory(options).total();
  options.recompute_fc = true;
  const size_t recomputed = plan_cuda_model_memory(options).total();
  EXPECT_EQ(kept - recomputed, size_t(2) * 11 * 65536 * 4 * 768 * 2);
  std::printf("[ plan     ] d12 B=1 T=65536 bf16: %s kept, %s with --recompute fc\n",
              format_bytes(kept).c_str(), format_bytes(recomputed).c_str());
}

// --recompute fc: the fc GEMM run again in backward gives the very bits the forward kept, so
// training with it is bit for bit training without it (losses, gradients, parameters), fp32 and
// bf16; and its plan holds one layer's fch and fch_gelu instead of L.
TEST(CudaModel, RecomputedFcTrainsBitForBitLikeKeptActivations) {
  GPT2_REQUIRE_GPU();
  const ModelConfig config = small_model_config();
  const int B = 2, T = 37, kSteps = 3;
  const ParameterLayout layout = ParameterLayout::for_config(config);
  std::vector<float> params(layout.total);
  init_parameters(params.data(), config, 41);
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    SCOPED_TRACE(to_string(precision));
    std::vector<float> losses[2], grads[2], finals[2];
    size_t plan_bytes[2] = {};
    for (int recompute = 0; recompute < 2; ++recompute) {
      ModelOptions options{config, B, T, AttentionKind::kNaive, precision};
      options.recompute_fc = recompute == 1;
      auto gpu = make_gpu_model(options);
      plan_bytes[recompute] = gpu->memory_plan().total();
      gpu->set_parameters(params.data());
      AdamWHyper hyper;
      hyper.lr = 1e-3f;
      for (int step = 1; step <= kSteps; ++step) {
        const std::vector<int> inputs = random_ints(B * T, config.vocab_size, 300 + step);
        const std::vector<int> targets = random_ints(B * T, config.vocab_size, 400 + step);
        gpu->zero_grad();
        losses[recompute].push_back(gpu->forward_backward(inputs.data(), targets.data(), 1.0f));
        gpu->adamw_step(hyper, step, 1.0f / std::max(1.0f, gpu->grad_norm()));
      }
      grads[recompute].resize(layout.total);
      gpu->get_gradients(grads[recompute].data());
      finals[recompute].resize(layout.total);
      gpu->get_parameters(finals[recompute].data());
    }
    EXPECT_EQ(losses[0], losses[1]);
    EXPECT_EQ(grads[0], grads[1]);
    EXPECT_EQ(finals[0], finals[1]);
    const size_t x = precision == Precision::kBf16 ? 2 : 4;
    EXPECT_EQ(plan_bytes[0] - plan_bytes[1],
              2 * size_t(config.num_layers - 1) * B * T * 4 * config.channels * x);
  }
}

// The one-round-trip step (queue_forward_backward per micro-batch, finish_step: loss sum, norm,
// clipping and AdamW decided on the device) with the micro-batches replayed as a CUDA graph is
// bit for bit the step launch by launch with the host deciding (forward_backward, grad_norm,
// adamw_step): losses, norms, gradients and parameters, fp32 and bf16, naive and flash, two
// micro-batches a step, the clip active. A non-finite loss skips the update on the device:
// parameters and AdamW moments stay as they were.
TEST(CudaModel, GraphedDeviceStepTrainsBitForBitLikeEagerHostStep) {
  GPT2_REQUIRE_GPU();
  const ModelConfig config = small_model_config();
  const int B = 2, T = 37, kSteps = 4, kMicro = 2;
  const float kClip = 0.05f;  // below the norms: the scale is applied every step
  const ParameterLayout layout = ParameterLayout::for_config(config);
  std::vector<float> params(layout.total);
  init_parameters(params.data(), config, 43);
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    for (AttentionKind attention : {AttentionKind::kNaive, AttentionKind::kFlash}) {
      SCOPED_TRACE(std::string(to_string(precision)) + " " + to_string(attention));
      std::vector<float> losses[2], norms[2], grads[2], finals[2];
      for (int device_step = 0; device_step < 2; ++device_step) {
        ModelOptions options{config, B, T, attention, precision};
        options.cuda_graphs = device_step == 1;
        auto gpu = make_gpu_model(options);
        gpu->set_parameters(params.data());
        AdamWHyper hyper;
        hyper.lr = 1e-3f;
        for (int step = 1; step <= kSteps; ++step) {
          gpu->zero_grad();
          double loss_sum = 0.0;
          for (int micro = 0; micro < kMicro; ++micro) {
            const int seed = 10 * step + micro;
            const std::vector<int> inputs = random_ints(B * T, config.vocab_size, 500 + seed);
            const std::vector<int> targets = random_ints(B * T, config.vocab_size, 600 + seed);
            if (device_step)
              gpu->queue_forward_backward(inputs.data(), targets.data(), 1.0f / kMicro);
            else
              loss_sum += gpu->forward_backward(inputs.data(), targets.data(), 1.0f / kMicro);
          }
          gpu->reduce_gradients();
          if (device_step) {
            const Model::StepOutcome outcome = gpu->finish_step(hyper, step, kClip, kMicro);
            EXPECT_TRUE(outcome.applied);
            losses[1].push_back(outcome.loss);
            norms[1].push_back(outcome.grad_norm);
          } else {
            const float norm = gpu->grad_norm();
            ASSERT_GT(norm, kClip);
            gpu->adamw_step(hyper, step, kClip / norm);
            losses[0].push_back(static_cast<float>(loss_sum / kMicro));
            norms[0].push_back(norm);
          }
        }
        grads[device_step].resize(layout.total);
        gpu->get_gradients(grads[device_step].data());
        finals[device_step].resize(layout.total);
        gpu->get_parameters(finals[device_step].data());

        if (device_step) {  // a NaN weight: a NaN loss, and the update is skipped
          std::vector<float> poisoned = finals[1];
          poisoned[layout.offsets[kLnfw]] = std::nanf("");
          gpu->set_parameters(poisoned.data());
          std::vector<float> m_before(layout.total), v_before(layout.total);
          gpu->get_optimizer_state(m_before.data(), v_before.data());
          gpu->zero_grad();
          const std::vector<int> inputs = random_ints(B * T, config.vocab_size, 77);
          gpu->queue_forward_backward(inputs.data(), inputs.data(), 1.0f);
          gpu->reduce_gradients();
          const Model::StepOutcome outcome = gpu->finish_step(hyper, kSteps + 1, kClip, 1);
          EXPECT_FALSE(outcome.applied);
          EXPECT_TRUE(std::isnan(outcome.loss));
          std::vector<float> after(layout.total), m_after(layout.total), v_after(layout.total);
          gpu->get_parameters(after.data());
          gpu->get_optimizer_state(m_after.data(), v_after.data());
          EXPECT_EQ(0, std::memcmp(after.data(), poisoned.data(), after.size() * sizeof(float)));
          EXPECT_EQ(m_after, m_before);
          EXPECT_EQ(v_after, v_before);
        }
      }
      EXPECT_EQ(losses[0], losses[1]);
      EXPECT_EQ(norms[0], norms[1]);
      EXPECT_EQ(grads[0], grads[1]);
      EXPECT_EQ(finals[0], finals[1]);
    }
  }
}

// A plan that cannot fit is refused before anything is allocated, naming the buffer.
TEST(CudaModel, PlanThatDoesNotFitIsRefusedBeforeAllocating) {
  GPT2_REQUIRE_GPU();
  const ModelConfig config = model_config_from_preset("d12", 32768);
  ModelOptions options{config, 4, 32768, AttentionKind::kNaive, Precision::kBf16};
  size_t free_before = 0, total = 0;
  GPT2_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  ASSERT_GT(plan_cuda_model_memory(options).total(), total);
  try {
    make_cuda_model(options);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    const std::string message = e.what();
    std::printf("[ model    ] refused: %s\n", message.c_str());
    EXPECT_NE(message.find("out of GPU memory"), std::string::npos);
    EXPECT_NE(message.find("attention probabilities"), std::string::npos);
    EXPECT_NE(message.find("bytes"), std::string::npos);
    EXPECT_NE(message.find("free"), std::string::npos);
  }
  size_t free_after = 0;
  GPT2_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  // The Context's cuBLAS workspace came and went; nothing of the plan stayed allocated.
  EXPECT_GE(free_after + (size_t(64) << 20), free_before);
}

TEST(CudaModel, ParametersOptimizerStateAndSamplingRoundTrip) {
  GPT2_REQUIRE_GPU();
  const ModelConfig config = small_model_config();
  const ParameterLayout layout = ParameterLayout::for_config(config);
  std::vector<float> params(layout.total), m(layout.total), v(layout.total);
  init_parameters(params.data(), config, 5);
  for (size_t i = 0; i < layout.total; ++i) {
    m[i] = 1e-3f * static_cast<float>(i % 97);
    v[i] = 1e-6f * static_cast<float>(i % 89);
  }
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    SCOPED_TRACE(to_string(precision));
    auto gpu = make_gpu_model(ModelOptions{config, 1, 16, AttentionKind::kFlash, precision});
    gpu->set_parameters(params.data());
    std::vector<float> back(layout.total), m_back(layout.total), v_back(layout.total);
    gpu->get_parameters(back.data());
    EXPECT_EQ(back, params);  // fp32, or the bf16 model's fp32 master copy: exact
    gpu->set_optimizer_state(m.data(), v.data());
    gpu->get_optimizer_state(m_back.data(), v_back.data());
    EXPECT_EQ(m_back, m);
    EXPECT_EQ(v_back, v);

    const std::vector<int> tokens = random_ints(16, config.vocab_size, 9);
    std::vector<float> logits(config.vocab_size);
    gpu->start_generation(1, 11);
    gpu->prefill(tokens.data(), 11, logits.data());
    CpuGpt2<float> cpu(config, 1, 16, AttentionKind::kFlash);
    std::vector<float> rounded = precision == Precision::kBf16 ? round_through<bf16>(params) : params;
    std::copy(rounded.begin(), rounded.end(), cpu.params());
    cpu.forward(tokens.data(), nullptr, 1, 11);
    const float* cpu_logits = cpu.buffer(kBufLogits) + 10 * config.padded_vocab_size;
    const double err = rel_l2(logits.data(), cpu_logits, logits.size());
    std::printf("[ model    ] %s last-position logits rel-L2 vs CPU %.2e\n", to_string(precision),
                err);
    EXPECT_LE(err, precision == Precision::kFp32 ? 1e-5 : 5e-2);
  }
}

/// The plan item of the classifier's logits (found by name: the plan's order is the model's).
size_t classifier_logits_bytes(const MemoryPlan& plan) {
  for (const MemoryItem& item : plan.items)
    if (item.name.find("classifier logits") != std::string::npos) return item.bytes;
  ADD_FAILURE() << "no classifier logits item in the plan";
  return 0;
}

// The plan needs no GPU: the logits item holds a chunk of rows, never (B,T,Vp), in the buffer
// that is then the layers' backward workspace (B,T,10C): as many rows as fit there (a multiple
// of 128), or the power of two of the 256 MiB budget when that is more.
TEST(CudaModelPlan, ClassifierLogitsHoldAChunkOfRows) {
  const ModelConfig config = model_config_from_preset("d12", 1024);
  const int B = 16, T = 1024;
  const size_t BT = size_t(B) * T, Vp = size_t(config.padded_vocab_size), C = 768;
  ModelOptions options{config, B, T, AttentionKind::kFlash, Precision::kBf16,
                       FlashKernelChoice::kPortable};
  const size_t workspace_bf16 = BT * 10 * C * 2;  // 240 MiB: 2501 rows of 50304 bf16 logits
  EXPECT_EQ(classifier_chunk_rows(options), 2432);
  const size_t chunk_bytes = classifier_logits_bytes(plan_cuda_model_memory(options));
  EXPECT_EQ(chunk_bytes, workspace_bf16);
  EXPECT_GE(chunk_bytes, 2432 * Vp * 2);
  const size_t whole_bytes = BT * Vp * 2;  // what (B,T,Vp) logits took
  std::printf("[ plan     ] d12 B=16 T=1024 bf16: logits %s instead of %s, %s saved\n",
              format_bytes(chunk_bytes).c_str(), format_bytes(whole_bytes).c_str(),
              format_bytes(whole_bytes - chunk_bytes).c_str());
  options.precision = Precision::kFp32;
  EXPECT_EQ(classifier_chunk_rows(options), 2432);
  EXPECT_EQ(classifier_logits_bytes(plan_cuda_model_memory(options)), BT * 10 * C * 4);
  options.precision = Precision::kBf16;
  // Inference only: no backward workspace, the budget's power of two.
  options.training = false;
  EXPECT_EQ(classifier_chunk_rows(options), 2048);
  EXPECT_EQ(classifier_logits_bytes(plan_cuda_model_memory(options)), 2048 * Vp * 2);
  options.training = true;

  // Chosen: as asked, at least B rows (generation's), at most B*T; never less than the
  // workspace the buffer also holds.
  options.classifier_chunk_rows = 37;
  EXPECT_EQ(classifier_chunk_rows(options), 37);
  EXPECT_EQ(classifier_logits_bytes(plan_cuda_model_memory(options)), workspace_bf16);
  options.classifier_chunk_rows = 1;
  EXPECT_EQ(classifier_chunk_rows(options), B);
  options.classifier_chunk_rows = 1 << 30;
  EXPECT_EQ(classifier_chunk_rows(options), int(BT));
  EXPECT_EQ(classifier_logits_bytes(plan_cuda_model_memory(options)), whole_bytes);
  options.classifier_chunk_rows = -1;
  EXPECT_THROW(plan_cuda_model_memory(options), Error);

  // A small model's whole batch fits one chunk by default.
  const ModelOptions small{small_model_config(), 2, 37, AttentionKind::kNaive, Precision::kFp32};
  EXPECT_EQ(classifier_chunk_rows(small), 74);
}

// The classifier in chunks of rows (37: two chunks; 5: fifteen, the last of 4 rows; 1: clamped to
// B = 2 rows) against one chunk of all B*T = 74 rows: the same per-position losses, gradients and
// residual gradient. fp32: each row's loss depends on its row only, and the one chunk and the
// many run the same arithmetic except that cuBLAS may pick another GEMM algorithm per row count
// (another summation order over C = 128 for the logits and dlnf, over the rows for dwte): 1e-5
// is some hundred fp32 ulps, while a row in the wrong place or a chunk lost gives O(1). bf16:
// a changed fp32 summation order can flip a bf16 rounding of a logit or a gradient, and dwte
// takes one bf16 rounding per chunk (matmul.cuh): 2e-2 relative, the step test's tolerance.
// Within one model, evaluate (forward-only cross-entropy) and forward_backward (the fused op)
// give the same mean loss bit for bit, and the plan item holds exactly the chunk.
TEST(CudaModel, ChunkedClassifierMatchesOneChunk) {
  GPT2_REQUIRE_GPU();
  const ModelConfig config = small_model_config();
  const int B = 2, T = 37;
  const ParameterLayout layout = ParameterLayout::for_config(config);
  std::vector<float> params(layout.total);
  init_parameters(params.data(), config, 31);
  const std::vector<int> inputs = random_ints(B * T, config.vocab_size, 32);
  const std::vector<int> targets = random_ints(B * T, config.vocab_size, 33);
  const std::vector<int> prompts = random_ints(B * 7, config.vocab_size, 34);
  struct Result {
    float loss = 0.0f;
    std::vector<float> losses, grads, dresidual, logits;
  };
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    const bool exact = precision == Precision::kFp32;
    const double tol = exact ? 1e-5 : 2e-2;
    const size_t x = exact ? 4 : 2;
    Result reference;
    for (int chunk_rows : {0, 37, 5, 1}) {
      SCOPED_TRACE(str_cat(to_string(precision), " chunk rows ", chunk_rows));
      ModelOptions options{config, B, T, AttentionKind::kNaive, precision};
      options.classifier_chunk_rows = chunk_rows;
      const int rows = classifier_chunk_rows(options);
      EXPECT_EQ(rows, chunk_rows == 0 ? B * T : std::max(chunk_rows, B));
      auto gpu = make_gpu_model(options);
      // The chunk shares its buffer with the layers' backward workspace (B,T,10C).
      EXPECT_EQ(classifier_logits_bytes(gpu->memory_plan()),
                std::max(size_t(rows) * config.padded_vocab_size * x,
                         size_t(B) * T * 10 * config.channels * x));
      gpu->set_parameters(params.data());
      const float evaluated = gpu->evaluate(inputs.data(), targets.data());
      gpu->zero_grad();
      Result r;
      r.loss = gpu->forward_backward(inputs.data(), targets.data(), 0.5f);
      EXPECT_EQ(r.loss, evaluated) << "fused vs forward-only cross-entropy";
      r.losses.resize(size_t(B) * T);
      gpu->get_losses(r.losses.data());
      r.grads.resize(layout.total);
      gpu->get_gradients(r.grads.data());
      r.dresidual.resize(size_t(B) * T * config.channels);
      gpu->get_residual_gradient(r.dresidual.data());
      r.logits.resize(size_t(B) * config.vocab_size);
      gpu->start_generation(B, T);
      gpu->prefill(prompts.data(), 7, r.logits.data());
      if (chunk_rows == 0) {
        reference = std::move(r);
        continue;
      }
      EXPECT_NEAR(r.loss, reference.loss, tol * std::fabs(reference.loss));
      for (size_t i = 0; i < r.losses.size(); ++i)
        ASSERT_NEAR(r.losses[i], reference.losses[i], tol * (1.0 + std::fabs(reference.losses[i])))
            << "position " << i;
      const double dres_err = rel_l2(r.dresidual.data(), reference.dresidual.data(),
                                     r.dresidual.size());
      std::printf("[ model    ] %s chunk %d: loss %.7f vs %.7f, dresidual rel-L2 %.2e\n",
                  to_string(precision), rows, r.loss, reference.loss, dres_err);
      EXPECT_LE(dres_err, tol);
      for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
        const size_t offset = layout.offsets[tensor], n = layout.sizes[tensor];
        const double err = rel_l2(r.grads.data() + offset, reference.grads.data() + offset, n);
        if (tensor == kWte) std::printf("[ model    ]   dwte rel-L2 %.2e\n", err);
        EXPECT_LE(err, tol) << ParameterLayout::name(tensor);
      }
      // Generation takes B rows whatever the chunk (the buffer holds at least B rows).
      EXPECT_LE(rel_l2(r.logits.data(), reference.logits.data(), r.logits.size()), tol);
    }
  }
}

}  // namespace
}  // namespace gpt2::gpu::test
