// --precision fp8 (model/cuda_fp8_linears.cuh, and with --fp8-classifier
// model/cuda_fp8_classifier.cuh): the block linears' GEMMs, and the classifier's forward and
// input gradient, in FP8 against the bf16 model they replace.
//
// FP8's rounding is coarse by design (E4M3 keeps 3 mantissa bits, a relative step of 2^-4;
// E5M2 for gradients 2 bits, 2^-3), and it does not average away in a GEMM: a K-term sum of
// products with independent relative errors e has a relative error of about e whatever K. So
// one step is checked against the bf16 step loosely (the loss within 2%, every gradient tensor
// within a relative L2 of 0.25: the gradients pass through two E5M2 roundings), and what FP8
// training must really show is checked over steps: on a batch it learns, the fp8 model's loss
// falls as the bf16 model's does and ends within 5% of it (weights cast again after every
// update, scales from the amax histories). The plan's FP8 buffers and the shapes FP8 refuses
// are checked without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "model/cuda_model.h"
#include "kernels/gpu/fp8_scale.cuh"
#include "model/parameters.h"

namespace gpt2::gpu::test {
namespace {

// The precisions every comparison with bf16 runs: the block linears in FP8, with them the
// classifier's forward and input-gradient GEMMs (--fp8-classifier), both with the forward
// GEMMs' fast accumulation (--fp8-fast-accumulation), and the classifier's weight gradient in
// FP8 too (--fp8-classifier all).
struct Fp8Variant {
  const char* name;
  bool fp8_classifier;
  bool fast_accumulation;
  bool classifier_weight_gradient;
};
constexpr Fp8Variant kFp8Variants[] = {
    {"fp8", false, false, false},
    {"fp8 + classifier", true, false, false},
    {"fp8 + classifier, fast accumulation", true, true, false},
    {"fp8 + classifier with dwte, fast accumulation", true, true, true}};

ModelOptions small_options(Precision precision, int B, int T,
                           const Fp8Variant& variant = kFp8Variants[0]) {
  ModelOptions options{small_model_config(), B, T, AttentionKind::kFlash, precision};
  options.fp8_classifier = variant.fp8_classifier;
  options.fp8_fast_accumulation = variant.fast_accumulation;
  options.fp8_classifier_weight_gradient = variant.classifier_weight_gradient;
  return options;
}

/// One forward and backward of `model` (a CUDA model) from zeroed gradients: the loss, and the
/// gradients (`total` floats, ParameterLayout's order) in grads.
float loss_and_gradients(Model& model, const std::vector<int>& inputs,
                         const std::vector<int>& targets, size_t total,
                         std::vector<float>& grads) {
  auto* cuda = dynamic_cast<CudaModelBase*>(&model);
  EXPECT_NE(cuda, nullptr);
  if (cuda == nullptr) return NAN;
  cuda->zero_grad();
  const float loss = cuda->forward_backward(inputs.data(), targets.data(), 1.0f);
  grads.resize(total);
  cuda->get_gradients(grads.data());
  return loss;
}

// The GPU tests: a small model's parameters (bf16-exact), skipped without FP8 tensor cores.
class CudaFp8 : public ::testing::Test {
 protected:
  void SetUp() override {
    GPT2_REQUIRE_FP8_GPU();
    params_.resize(layout_.total);
    init_parameters(params_.data(), config_, 5);
    params_ = round_through<bf16>(params_);
  }
  /// The losses of `steps` optimizer steps of one micro-batch each: fresh tokens from `seed`
  /// every step, or (learn_one_batch) the same batch every step.
  std::vector<float> train(Model& model, int B, int T, int steps, uint64_t seed,
                           bool learn_one_batch = false, float lr = 1e-3f,
                           int first_step = 1) const {
    AdamWHyper hyper;
    hyper.lr = lr;
    std::vector<float> losses;
    for (int step = first_step; step < first_step + steps; ++step) {
      const uint64_t draw = seed + (learn_one_batch ? 0 : 2 * step);
      const std::vector<int> inputs = random_ints(B * T, config_.vocab_size, draw);
      const std::vector<int> targets = random_ints(B * T, config_.vocab_size, draw + 1);
      model.zero_grad();
      model.queue_forward_backward(inputs.data(), targets.data(), 1.0f);
      const Model::StepOutcome outcome = model.finish_step(hyper, step, 1.0f, 1);
      EXPECT_TRUE(outcome.applied && std::isfinite(outcome.loss)) << "step " << step;
      losses.push_back(outcome.loss);
    }
    return losses;
  }
  /// ResumesBitForBitWithItsScales, for one of kFp8Variants.
  void check_resume(const Fp8Variant& variant) const;
  const ModelConfig config_ = small_model_config();
  const ParameterLayout layout_ = ParameterLayout::for_config(config_);
  std::vector<float> params_;
};

TEST(CudaFp8Plan, NamesItsBuffersAndRefusesShapesFp8CannotTake) {
  const ModelConfig config = model_config_from_preset("d12", 1024);
  ModelOptions options{config, 16, 1024, AttentionKind::kFlash, Precision::kFp8};
  const MemoryPlan fp8 = plan_cuda_model_memory(options);
  options.precision = Precision::kBf16;
  const MemoryPlan bf16 = plan_cuda_model_memory(options);
  size_t weights = 0, operands = 0, inputs = 0, scales = 0;
  for (const auto& item : fp8.items) {
    if (item.name.find("FP8 block weights") != std::string::npos) weights = item.bytes;
    if (item.name.find("FP8 GEMM operands") != std::string::npos) operands = item.bytes;
    if (item.name.find("FP8 block inputs") != std::string::npos) inputs = item.bytes;
    if (item.name.find("FP8 scales") != std::string::npos) scales = item.bytes;
  }
  const size_t BT = 16 * 1024, C = 768, L = 12;
  EXPECT_EQ(weights, 2 * 12 * C * C * L);  // both orders of 12 C^2 codes per layer
  EXPECT_EQ(inputs, 7 * C * BT * L);       // every layer's X^T: 3 x C + 4C codes a row
  EXPECT_EQ(operands, 2 * BT * 4 * C);  // X, fcproj's X; then dY in both orders
  EXPECT_GT(scales, 0u);
  // What fp8 adds, less the L-1 layers of bf16 ln1, ln2 and GELU output it does not keep.
  EXPECT_EQ(fp8.total() - bf16.total() + (L - 1) * BT * (4 * C + 2 * C) * 2,
            weights + inputs + operands + scales);
  EXPECT_LT(fp8.total(), bf16.total());
  std::printf("[ plan     ] d12 B=16 T=1024: bf16 %s, fp8 %s\n",
              format_bytes(bf16.total()).c_str(), format_bytes(fp8.total()).c_str());
  // B*T not a multiple of 16 (the weight gradient's inner dimension), C not one of 16.
  options.precision = Precision::kFp8;
  options.batch_size = 3;
  options.seq_len = 37;
  EXPECT_THROW(plan_cuda_model_memory(options), UsageError);
  ModelConfig narrow = small_model_config();
  narrow.channels = 136;
  narrow.num_heads = 2;
  EXPECT_THROW(plan_cuda_model_memory(ModelOptions{narrow, 2, 32, AttentionKind::kFlash,
                                                   Precision::kFp8}),
               UsageError);
  // Inference: nothing FP8 is planned (evaluation and generation run in bf16).
  ModelOptions inference{config, 16, 1024, AttentionKind::kFlash, Precision::kFp8};
  inference.training = false;
  for (const auto& item : plan_cuda_model_memory(inference).items)
    if (item.name.find("FP8") != std::string::npos) {
      EXPECT_EQ(item.bytes, 0u) << item.name;
    }
}

TEST_F(CudaFp8, OneStepTracksTheBf16Step) {
  const int B = 2, T = 32;
  const std::vector<int> inputs = random_ints(B * T, config_.vocab_size, 31);
  const std::vector<int> targets = random_ints(B * T, config_.vocab_size, 32);
  auto step = [&](const ModelOptions& options, std::vector<float>& grads) {
    std::unique_ptr<Model> model = make_cuda_model(options);
    model->set_parameters(params_.data());
    return loss_and_gradients(*model, inputs, targets, layout_.total, grads);
  };
  std::vector<float> bf16_grads, grads;
  const float bf16_loss = step(small_options(Precision::kBf16, B, T), bf16_grads);
  for (const Fp8Variant& variant : kFp8Variants) {
    const float loss =
        step(small_options(Precision::kFp8, B, T, variant), grads);
    std::printf("[ fp8      ] one step: loss bf16 %.6f %s %.6f\n", bf16_loss, variant.name, loss);
    EXPECT_NEAR(loss, bf16_loss, 0.02 * std::fabs(bf16_loss)) << variant.name;
    for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
      const size_t offset = layout_.offsets[tensor], n = layout_.sizes[tensor];
      const double err = rel_l2(grads.data() + offset, bf16_grads.data() + offset, n);
      std::printf("[ fp8      ]   d%-9s rel-L2 to bf16 %.3f\n", ParameterLayout::name(tensor),
                  err);
      EXPECT_LE(err, 0.25) << variant.name << " " << ParameterLayout::name(tensor);
    }
  }
}

TEST_F(CudaFp8, TrainingFollowsBf16) {
  const int B = 4, T = 32, kSteps = 30;
  auto curve = [&](const ModelOptions& options, const char* name) {
    std::unique_ptr<Model> model = make_cuda_model(options);
    model->set_parameters(params_.data());
    std::vector<float> losses = train(*model, B, T, kSteps, 41, /*learn_one_batch=*/true, 3e-3f);
    std::printf("[ fp8      ] %s: loss %.4f -> %.4f\n", name, losses.front(), losses.back());
    return losses;
  };
  const std::vector<float> bf16 = curve(small_options(Precision::kBf16, B, T), "bf16");
  EXPECT_LT(bf16.back(), 0.5f * bf16.front());
  // The batch is learned (well below its first loss) by each, and fp8 ends near bf16.
  for (const Fp8Variant& variant : kFp8Variants) {
    const std::vector<float> fp8 =
        curve(small_options(Precision::kFp8, B, T, variant), variant.name);
    EXPECT_LT(fp8.back(), 0.5f * fp8.front()) << variant.name;
    EXPECT_NEAR(fp8.back(), bf16.back(), 0.05 * bf16.back()) << variant.name;
  }
}

// Saturated casts are counted (finish_step's fp8_saturated): LayerNorm gains of 1000 put ln1
// and ln2 far beyond E4M3's 448 at the first step's scale of 1, so every layer's qkv and fc
// inputs saturate (and maybe more of what follows them), at most every delayed-scaled tensor;
// fp8_saturated_tensors names them.
// The same batch again, the weights unchanged (lr 0): the scales catch up with the amaxes, a
// tensor downstream of a clamped one perhaps a step later than those before it (its values
// grow once theirs are no longer clamped), so the count reaches 0 within a step per tensor.
// A bf16 model counts nothing (-1).
TEST_F(CudaFp8, CountsTheCastsItSaturated) {
  const int B = 2, T = 32, L = config_.num_layers;
  std::vector<float> loud = params_;
  for (const int tensor : {kLn1w, kLn2w})
    for (size_t i = 0; i < layout_.sizes[tensor]; ++i) loud[layout_.offsets[tensor] + i] *= 1000;
  const std::vector<int> inputs = random_ints(B * T, config_.vocab_size, 130);
  const std::vector<int> targets = random_ints(B * T, config_.vocab_size, 131);
  AdamWHyper still;
  auto saturated = [&](Model& model, int step) {
    model.zero_grad();
    model.queue_forward_backward(inputs.data(), targets.data(), 1.0f);
    const Model::StepOutcome outcome = model.finish_step(still, step, 1.0f, 1);
    EXPECT_TRUE(outcome.applied) << "step " << step;
    return outcome.fp8_saturated;
  };
  std::unique_ptr<Model> fp8 =
      make_cuda_model(small_options(Precision::kFp8, B, T, kFp8Variants[1]));
  fp8->set_parameters(loud.data());
  const int first = saturated(*fp8, 1);
  std::printf("[ fp8      ] saturated casts: step 1 %d\n", first);
  EXPECT_GE(first, 2 * L);
  EXPECT_LE(first, 8 * L + 1);  // the blocks' inputs and gradients, and the classifier's lnf
  // By name, once each so far: every layer's qkv and fc inputs among them.
  std::vector<std::string> names;
  for (const auto& [name, steps] : fp8->fp8_saturated_tensors()) {
    EXPECT_EQ(steps, 1) << name;
    names.push_back(name);
  }
  for (int l = 0; l < L; ++l)
    for (const char* input : {" qkv input", " fc input"}) {
      const std::string name = "layer " + std::to_string(l) + input;
      EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
    }
  int step = 2, count = first;
  while (count > 0 && step <= 8 * L + 2) count = saturated(*fp8, step++);
  EXPECT_EQ(count, 0) << "the scales had not caught up with the amaxes by step " << step - 1;
  std::unique_ptr<Model> bf16 = make_cuda_model(small_options(Precision::kBf16, B, T));
  bf16->set_parameters(loud.data());
  EXPECT_EQ(saturated(*bf16, 1), -1);
}

// --fp8-margin and --fp8-gradient-margin reach the delayed scales: after one step from the
// same start (naive attention, so the same amaxes bit for bit), margin 2 leaves every block
// input's scale a quarter of margin 0's, gradient margin 3 every gradient's an eighth, and the
// weights' (current scaling, no margin) as they were. The precision state is
// Fp8Linears::save_state's: a 24-byte header (tag, count, updates), then the states by role
// (weights, inputs, gradients), layer and linear.
TEST_F(CudaFp8, MarginsDivideTheirRolesDelayedScales) {
  const int B = 2, T = 32, L = config_.num_layers, count = 12 * L;
  const size_t header = 24;
  std::vector<std::vector<Fp8ScaleState>> states;
  for (const int margin : {0, 2}) {
    ModelOptions options = small_options(Precision::kFp8, B, T);  // the classifier in bf16
    options.attention = AttentionKind::kNaive;
    options.fp8_margin = margin;
    options.fp8_gradient_margin = margin == 0 ? 0 : 3;
    std::unique_ptr<Model> model = make_cuda_model(options);
    model->set_parameters(params_.data());
    train(*model, B, T, 1, 140, /*learn_one_batch=*/false, /*lr=*/0.0f);
    const std::vector<uint8_t> bytes = model->precision_state();
    ASSERT_EQ(bytes.size(), header + count * sizeof(Fp8ScaleState));
    states.emplace_back(static_cast<size_t>(count));
    std::memcpy(states.back().data(), bytes.data() + header, count * sizeof(Fp8ScaleState));
  }
  for (int i = 0; i < count; ++i) {
    const float margin0 = states[0][static_cast<size_t>(i)].scale;
    const float divisor = i < 4 * L ? 1.0f : i < 8 * L ? 4.0f : 8.0f;
    EXPECT_EQ(states[1][static_cast<size_t>(i)].scale, margin0 / divisor) << "state " << i;
  }
}

// --recompute fc with fp8: the fc GEMM run again in backward from the same codes gives the
// forward's very bits, so training is bit for bit the same (naive attention: deterministic);
// the plan holds L-1 fewer layers of fch, and ln2 per layer again (the recompute reads it).
TEST_F(CudaFp8, RecomputedFcTrainsBitForBit) {
  const int B = 2, T = 32, kSteps = 3;
  std::vector<float> losses[2], finals[2];
  size_t plan_bytes[2] = {};
  for (int recompute = 0; recompute < 2; ++recompute) {
    ModelOptions options{config_, B, T, AttentionKind::kNaive, Precision::kFp8};
    options.recompute_fc = recompute == 1;
    std::unique_ptr<Model> model = make_cuda_model(options);
    plan_bytes[recompute] = model->memory_plan().total();
    model->set_parameters(params_.data());
    losses[recompute] = train(*model, B, T, kSteps, 70);
    finals[recompute].resize(layout_.total);
    model->get_parameters(finals[recompute].data());
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(finals[0], finals[1]);
  const size_t layers = config_.num_layers - 1, row = size_t(B) * T * config_.channels * 2;
  EXPECT_EQ(plan_bytes[0] - plan_bytes[1], layers * 4 * row - layers * row);
}

// A resume (gpt2-train --resume: parameters, AdamW moments and the precision state from the
// checkpoint pair) continues an fp8 run bit for bit: the scales' histories and their update
// count come back with the rest (naive attention: deterministic).
TEST_F(CudaFp8, ResumesBitForBitWithItsScales) {
  for (const Fp8Variant& variant : kFp8Variants) {
    SCOPED_TRACE(variant.name);
    check_resume(variant);
  }
}

void CudaFp8::check_resume(const Fp8Variant& variant) const {
  const int B = 2, T = 32;
  auto make = [&] {
    ModelOptions options = small_options(Precision::kFp8, B, T, variant);
    options.attention = AttentionKind::kNaive;
    return make_cuda_model(options);
  };
  std::unique_ptr<Model> straight = make();
  straight->set_parameters(params_.data());
  const std::vector<float> losses = train(*straight, B, T, 4, 90);
  std::unique_ptr<Model> first = make();
  first->set_parameters(params_.data());
  train(*first, B, T, 2, 90);
  std::vector<float> params(layout_.total), m(layout_.total), v(layout_.total);
  first->get_parameters(params.data());
  first->get_optimizer_state(m.data(), v.data());
  const std::vector<uint8_t> scales = first->precision_state();
  EXPECT_FALSE(scales.empty());
  std::unique_ptr<Model> resumed = make();
  resumed->set_parameters(params.data());
  resumed->set_optimizer_state(m.data(), v.data());
  EXPECT_TRUE(resumed->set_precision_state(scales));
  const std::vector<float> rest = train(*resumed, B, T, 2, 90, false, 1e-3f, /*first_step=*/3);
  EXPECT_EQ(rest, std::vector<float>(losses.begin() + 2, losses.end()));
  std::vector<float> a(layout_.total), b(layout_.total);
  straight->get_parameters(a.data());
  resumed->get_parameters(b.data());
  EXPECT_EQ(a, b);
  // Bytes of another shape are refused; a bf16 model keeps no precision state.
  std::vector<uint8_t> cut(scales.begin(), scales.end() - 16);
  EXPECT_THROW(resumed->set_precision_state(cut), Error);
  std::unique_ptr<Model> bf16 = make_cuda_model(small_options(Precision::kBf16, B, T));
  EXPECT_TRUE(bf16->precision_state().empty());
  EXPECT_FALSE(bf16->set_precision_state(scales));
}

// Gradient accumulation in fp8: two micro-batches of B sequences give the step one micro-batch
// of 2B gives, within FP8's rounding (the weight gradients accumulate with += over the
// micro-batches, the amaxes over the whole step, and the scales update once per step).
TEST_F(CudaFp8, AccumulatesMicroBatchesLikeOneBatch) {
  const int B = 2, T = 32, kSteps = 3;
  std::vector<float> losses[2];
  for (int split = 0; split < 2; ++split) {
    const int micro = split == 0 ? 1 : 2, rows = 2 * B / micro;
    std::unique_ptr<Model> model = make_cuda_model(small_options(Precision::kFp8, rows, T));
    model->set_parameters(params_.data());
    AdamWHyper hyper;
    hyper.lr = 1e-3f;
    for (int step = 1; step <= kSteps; ++step) {
      const std::vector<int> inputs = random_ints(2 * B * T, config_.vocab_size, 110 + step);
      const std::vector<int> targets = random_ints(2 * B * T, config_.vocab_size, 120 + step);
      model->zero_grad();
      for (int m = 0; m < micro; ++m) {
        const size_t offset = static_cast<size_t>(m) * rows * T;
        model->queue_forward_backward(inputs.data() + offset, targets.data() + offset,
                                      1.0f / static_cast<float>(micro));
      }
      const Model::StepOutcome outcome = model->finish_step(hyper, step, 1.0f, micro);
      ASSERT_TRUE(outcome.applied && std::isfinite(outcome.loss));
      losses[split].push_back(outcome.loss);
    }
  }
  for (int step = 0; step < kSteps; ++step)
    EXPECT_NEAR(losses[1][static_cast<size_t>(step)], losses[0][static_cast<size_t>(step)],
                0.02 * losses[0][static_cast<size_t>(step)])
        << "step " << step + 1;
}

// A training fp8 model samples between steps (gpt2-train --sample-every) in bf16, its caches in
// the FP8 inputs buffer (it keeps one layer of ln1 and ln2): the logits are the bf16 model's
// with the same parameters, bit for bit; and the next training step runs on.
TEST_F(CudaFp8, GeneratesBetweenStepsAsTheBf16ModelDoes) {
  const int B = 2, T = 32, kPrompt = 5, kTotal = 9;
  std::unique_ptr<Model> fp8 = make_cuda_model(small_options(Precision::kFp8, B, T));
  fp8->set_parameters(params_.data());
  train(*fp8, B, T, 1, 51);
  std::vector<float> params(layout_.total);
  fp8->get_parameters(params.data());  // the master weights: the bf16 model rounds them alike
  std::unique_ptr<Model> bf16 = make_cuda_model(small_options(Precision::kBf16, B, T));
  bf16->set_parameters(params.data());
  std::vector<std::vector<float>> logits(2);
  for (int m = 0; m < 2; ++m) {
    Model& model = m == 0 ? *bf16 : *fp8;
    model.start_generation(B, kTotal);
    std::vector<float> step_logits(static_cast<size_t>(B) * config_.vocab_size);
    const std::vector<int> prompt = random_ints(B * kPrompt, config_.vocab_size, 53);
    model.prefill(prompt.data(), kPrompt, step_logits.data());
    logits[m].insert(logits[m].end(), step_logits.begin(), step_logits.end());
    for (int t = kPrompt; t < kTotal; ++t) {
      const std::vector<int> next = random_ints(B, config_.vocab_size, 60 + t);
      model.decode_step(next.data(), step_logits.data());
      logits[m].insert(logits[m].end(), step_logits.begin(), step_logits.end());
    }
  }
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_TRUE(std::isfinite(train(*fp8, B, T, 1, 57).back()));
}

// gpt2-medium's shape (24 layers, 1024 channels, 16 heads; a small vocabulary and T), where a
// 2000-step fp8 run ended 4% above bf16's validation loss and d12 did not (docs/fp8.md): after
// three steps that leave the weights as they are (lr 0) but fill every layer's amax history
// and update its scales, one step's gradients against the bf16 step's, layer by layer. A
// defect in what depends on L or C (a layer's scale state, its codes, the amax of a wide row)
// sends that layer's gradients off by a relative L2 of order 1; FP8's own rounding measured up
// to 0.12 at two layers and grows as a gradient passes more E5M2 roundings on its way down, so
// the bound is 0.5. The per-layer figures are printed: they show how the error grows with depth.
TEST(CudaFp8Shapes, Gpt2MediumLayersTrackTheBf16Step) {
  GPT2_REQUIRE_FP8_GPU();
  ModelConfig config = small_model_config();
  config.num_layers = 24;
  config.channels = 1024;
  config.num_heads = 16;
  const ParameterLayout layout = ParameterLayout::for_config(config);
  std::vector<float> params(layout.total);
  init_parameters(params.data(), config, 7);
  params = round_through<bf16>(params);
  const int B = 2, T = 64;
  AdamWHyper still;  // lr 0, no weight decay: the steps move the scales, not the weights
  auto gradients = [&](Precision precision, std::vector<float>& grads) {
    ModelOptions options{config, B, T, AttentionKind::kFlash, precision};
    options.fp8_classifier = precision == Precision::kFp8;
    std::unique_ptr<Model> model = make_cuda_model(options);
    model->set_parameters(params.data());
    for (int step = 1; step <= 3; ++step) {
      const std::vector<int> inputs = random_ints(B * T, config.vocab_size, 200 + 2 * step);
      const std::vector<int> targets = random_ints(B * T, config.vocab_size, 201 + 2 * step);
      model->zero_grad();
      model->queue_forward_backward(inputs.data(), targets.data(), 1.0f);
      EXPECT_TRUE(model->finish_step(still, step, 1.0f, 1).applied) << "step " << step;
    }
    return loss_and_gradients(*model, random_ints(B * T, config.vocab_size, 300),
                              random_ints(B * T, config.vocab_size, 301), layout.total, grads);
  };
  std::vector<float> bf16_grads, fp8_grads;
  const float bf16_loss = gradients(Precision::kBf16, bf16_grads);
  const float fp8_loss = gradients(Precision::kFp8, fp8_grads);
  std::printf("[ fp8      ] L=24 C=1024: loss bf16 %.6f fp8 %.6f\n", bf16_loss, fp8_loss);
  EXPECT_NEAR(fp8_loss, bf16_loss, 0.02 * std::fabs(bf16_loss));
  for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
    const bool per_layer = ParameterLayout::is_per_layer(tensor);
    const int layers = per_layer ? config.num_layers : 1;
    const size_t n = layout.sizes[tensor] / static_cast<size_t>(layers);
    std::string profile;
    for (int l = 0; l < layers; ++l) {
      const size_t offset = per_layer ? layout.layer_offset(tensor, l) : layout.offsets[tensor];
      const double err = rel_l2(fp8_grads.data() + offset, bf16_grads.data() + offset, n);
      char figure[16];
      std::snprintf(figure, sizeof figure, " %.2f", err);
      profile += figure;
      EXPECT_LE(err, 0.5) << ParameterLayout::name(tensor) << " layer " << l;
    }
    std::printf("[ fp8      ]   d%-9s rel-L2 to bf16, layer 0 up:%s\n",
                ParameterLayout::name(tensor), profile.c_str());
  }
}

}  // namespace
}  // namespace gpt2::gpu::test
