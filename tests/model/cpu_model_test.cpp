/**
 * @file cpu_model_test.cpp
 * @brief Tests for model/cpu_model.h: gradients, attention kinds, accumulation contracts,
 *        training behaviour and the memory plan of the CPU backend.
 *
 * - Gradient check: CpuGpt2<double>, tiny config (V=37/Vp=40, maxT=8, L=2, NH=2, C=8, B=2,
 *   T=5), EVERY parameter against the 4th-order central difference, both attention kinds
 *   (flash with 2x3 tiles), parameters wider than GPT-2's init so nonlinearities matter.
 * - Naive and flash agree (float): loss, and every gradient within 1e-5 of its tensor's max.
 * - Backward twice: gradients exactly double where an element gets one += per backward (all
 *   but wte and wpe, whose rows sum several tokens in sequence: a few ulps allowed); every
 *   backward workspace buffer repeats bit for bit.
 * - Model interface: initial loss ~ ln V, AdamW learns a repeated batch, decay only where
 *   ParameterLayout::decays, optimizer state round trips, the memory plan is exact and
 *   enforced. (Generation with the key/value cache: generation_test.cpp.)
 */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <omp.h>

#include "base/error.h"
#include "base/rng.h"
#include "model/cpu_model.h"
#include "model/model.h"
#include "model/parameters.h"
#include "test_fixtures.h"

namespace gpt2 {
namespace {

using testing::tiny_config;

using testing::random_tokens;

// A config with more heads and an odd T, still fast on 2 cores.
ModelConfig small_config() { return testing::model_config(32, 50, 64, 2, 4, 32); }

// Random parameters of moderate size (wider than GPT-2's init): LayerNorm weights around 1,
// biases around 0, weights ~ N(0, weight_std). Padding rows of wte are random too: the loss
// must not depend on them.
template <typename Real>
void fill_random(Real* params, const ModelConfig& config, uint64_t seed, double weight_std) {
  const ParameterLayout layout = ParameterLayout::for_config(config);
  Rng rng(seed);
  for (int t = 0; t < kNumParamTensors; ++t) {
    Real* p = params + layout.offsets[t];
    const bool ln_weight = t == kLn1w || t == kLn2w || t == kLnfw;
    const bool bias = t == kLn1b || t == kQkvb || t == kAttprojb || t == kLn2b || t == kFcb ||
                      t == kFcprojb || t == kLnfb;
    for (size_t i = 0; i < layout.sizes[t]; ++i) {
      const double z = rng.normal();
      p[i] = static_cast<Real>(ln_weight ? 1.0 + 0.1 * z : bias ? 0.1 * z : weight_std * z);
    }
  }
}

double max_abs(const float* p, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(p[i])));
  return m;
}

// ---------------------------------------------------------------------------------------------
// Gradient check

// Restores the OpenMP thread count on scope exit.
class ScopedThreads {
 public:
  explicit ScopedThreads(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ScopedThreads() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

void check_gradients(AttentionKind attention) {
  // ~17k forwards of a model this small are all fork/join overhead on several threads (and
  // slow to a crawl when other jobs share the cores); the ops are thread-count independent.
  const ScopedThreads single_thread(1);
  const ModelConfig config = tiny_config();
  const int B = 2, T = 5;
  CpuGpt2<double> model(config, B, T, attention, cpu::FlashBlocks{2, 3});
  fill_random(model.params(), config, 123, 0.3);
  const std::vector<int> inputs = random_tokens(B * T, config.vocab_size, 1);
  const std::vector<int> targets = random_tokens(B * T, config.vocab_size, 2);

  model.zero_grad();
  const double loss = model.forward(inputs.data(), targets.data());
  ASSERT_TRUE(std::isfinite(loss));
  model.backward(1.0);
  const size_t n = model.num_parameters();
  const std::vector<double> analytic(model.grads(), model.grads() + n);

  const ParameterLayout& layout = model.layout();
  const double h = 1e-4;
  int failures = 0;
  for (int t = 0; t < kNumParamTensors; ++t) {
    double worst = 0;
    for (size_t j = 0; j < layout.sizes[t]; ++j) {
      const size_t i = layout.offsets[t] + j;
      double* p = model.params() + i;
      const double saved = *p;
      auto loss_at = [&](double delta) {
        *p = saved + delta;
        return model.forward(inputs.data(), targets.data());
      };
      const double numeric =
          (8.0 * (loss_at(h) - loss_at(-h)) - (loss_at(2 * h) - loss_at(-2 * h))) / (12.0 * h);
      *p = saved;
      const double err = std::fabs(numeric - analytic[i]);
      const double scale = std::max(std::fabs(numeric), std::fabs(analytic[i]));
      worst = std::max(worst, err / std::max(scale, 1e-4));
      if (err > 1e-6 * scale + 1e-10 && ++failures <= 10)
        ADD_FAILURE() << ParameterLayout::name(t) << "[" << j << "]: analytic " << analytic[i]
                      << " numeric " << numeric << " (abs err " << err << ")";
    }
    ::testing::Test::RecordProperty(std::string("worst_rel_err_") + ParameterLayout::name(t),
                                    str_cat(worst));
  }
  EXPECT_EQ(failures, 0);

  // wte's padding rows [V, Vp) only feed excluded logits: exactly no gradient.
  for (size_t i = size_t(config.vocab_size) * config.channels; i < layout.sizes[kWte]; ++i)
    ASSERT_EQ(analytic[i], 0.0) << "wte padding element " << i;

  // loss_scale scales the gradient.
  model.forward(inputs.data(), targets.data());
  model.zero_grad();
  model.backward(0.25);
  for (size_t i = 0; i < n; ++i)
    ASSERT_NEAR(model.grads()[i], 0.25 * analytic[i], 1e-12 * (1 + std::fabs(analytic[i]))) << i;
}

TEST(CpuGpt2GradientCheck, NaiveAttentionMatchesFiniteDifferences) {
  check_gradients(AttentionKind::kNaive);
}

TEST(CpuGpt2GradientCheck, FlashAttentionMatchesFiniteDifferences) {
  check_gradients(AttentionKind::kFlash);
}

// ---------------------------------------------------------------------------------------------
// Naive vs flash

TEST(CpuGpt2, NaiveAndFlashAgree) {
  const ModelConfig config = small_config();
  const int B = 3, T = 29;
  CpuGpt2<float> naive(config, B, T, AttentionKind::kNaive);
  CpuGpt2<float> flash(config, B, T, AttentionKind::kFlash, cpu::FlashBlocks{8, 16});
  fill_random(naive.params(), config, 77, 0.2);
  std::copy(naive.params(), naive.params() + naive.num_parameters(), flash.params());
  const std::vector<int> inputs = random_tokens(B * T, config.vocab_size, 3);
  const std::vector<int> targets = random_tokens(B * T, config.vocab_size, 4);

  naive.zero_grad();
  flash.zero_grad();
  const float loss_naive = naive.forward(inputs.data(), targets.data());
  const float loss_flash = flash.forward(inputs.data(), targets.data());
  EXPECT_NEAR(loss_flash, loss_naive, 1e-5 * std::fabs(loss_naive));
  naive.backward(1.0f);
  flash.backward(1.0f);
  const ParameterLayout& layout = naive.layout();
  for (int t = 0; t < kNumParamTensors; ++t) {
    const float* a = naive.grads() + layout.offsets[t];
    const float* b = flash.grads() + layout.offsets[t];
    const double scale = max_abs(a, layout.sizes[t]);
    ASSERT_GT(scale, 0.0) << ParameterLayout::name(t) << " has no gradient";
    for (size_t i = 0; i < layout.sizes[t]; ++i)
      ASSERT_LE(std::fabs(double(a[i]) - b[i]), 1e-5 * scale)
          << ParameterLayout::name(t) << "[" << i << "]: naive " << a[i] << " flash " << b[i];
  }
}

// ---------------------------------------------------------------------------------------------
// Accumulation contracts

void check_backward_twice(AttentionKind attention) {
  const ModelConfig config = small_config();
  const int B = 2, T = 17;
  CpuGpt2<float> model(config, B, T, attention, cpu::FlashBlocks{4, 8});
  fill_random(model.params(), config, 5, 0.2);
  const std::vector<int> inputs = random_tokens(B * T, config.vocab_size, 6);
  const std::vector<int> targets = random_tokens(B * T, config.vocab_size, 7);
  const size_t n = model.num_parameters();
  const size_t logits_size = size_t(B) * T * config.padded_vocab_size;

  model.zero_grad();
  model.forward(inputs.data(), targets.data());
  const std::vector<float> logits(model.buffer(kBufLogits), model.buffer(kBufLogits) + logits_size);
  model.backward(1.0f);
  const std::vector<float> once(model.grads(), model.grads() + n);
  const std::vector<CpuBufferSpec> specs = cpu_buffer_specs(config, B, T, attention);
  std::vector<std::vector<float>> workspace_once(kNumCpuBuffers);
  for (int id = kBufDLosses; id < kNumCpuBuffers; ++id)
    workspace_once[id].assign(model.buffer(CpuBuffer(id)),
                              model.buffer(CpuBuffer(id)) + specs[id].elements);

  model.backward(1.0f);
  const ParameterLayout& layout = model.layout();
  for (int t = 0; t < kNumParamTensors; ++t) {
    const float* g1 = once.data() + layout.offsets[t];
    const float* g2 = model.grads() + layout.offsets[t];
    const bool several_terms = t == kWte || t == kWpe;
    const double tolerance = several_terms ? 1e-6 * max_abs(g1, layout.sizes[t]) : 0.0;
    for (size_t i = 0; i < layout.sizes[t]; ++i)
      ASSERT_LE(std::fabs(double(g2[i]) - 2.0 * g1[i]), tolerance)
          << ParameterLayout::name(t) << "[" << i << "]: once " << g1[i] << " twice " << g2[i];
  }
  for (int id = kBufDLosses; id < kNumCpuBuffers; ++id) {
    const float* now = model.buffer(CpuBuffer(id));
    for (size_t i = 0; i < specs[id].elements; ++i)
      ASSERT_EQ(now[i], workspace_once[id][i]) << specs[id].name << "[" << i << "]";
  }
  // Backward leaves the forward activations alone.
  EXPECT_TRUE(std::equal(logits.begin(), logits.end(), model.buffer(kBufLogits)));
}

TEST(CpuGpt2, BackwardTwiceDoublesGradientsNaive) { check_backward_twice(AttentionKind::kNaive); }
TEST(CpuGpt2, BackwardTwiceDoublesGradientsFlash) { check_backward_twice(AttentionKind::kFlash); }

TEST(CpuGpt2, ShorterForwardMatchesCausalPrefix) {
  // Causal attention: positions [0, t) of a sequence do not see later tokens, so a forward on
  // the prefix gives the same logits there, even though the layers are packed differently.
  const ModelConfig config = small_config();
  const int T = 20, prefix = 11;
  CpuGpt2<double> model(config, 2, T, AttentionKind::kFlash, cpu::FlashBlocks{4, 4});
  fill_random(model.params(), config, 8, 0.2);
  const std::vector<int> tokens = random_tokens(2 * T, config.vocab_size, 9);
  model.forward(tokens.data(), tokens.data());
  const size_t Vp = config.padded_vocab_size;
  const std::vector<double> full(model.buffer(kBufLogits), model.buffer(kBufLogits) + T * Vp);
  model.forward(tokens.data(), nullptr, 1, prefix);
  EXPECT_EQ(model.current_seq_len(), prefix);
  for (size_t i = 0; i < prefix * Vp; ++i)
    ASSERT_NEAR(model.buffer(kBufLogits)[i], full[i], 1e-12) << i;
  EXPECT_THROW(model.backward(1.0), Error);  // no targets in the last forward
  EXPECT_THROW(model.forward(tokens.data(), nullptr, 3, 4), Error);  // B beyond the buffers
  std::vector<int> bad = tokens;
  bad[3] = config.vocab_size;
  EXPECT_THROW(model.forward(bad.data(), tokens.data()), Error);
}

// ---------------------------------------------------------------------------------------------
// The Model interface

ModelOptions gpt2_like_options(AttentionKind attention) {
  ModelOptions options;
  options.config.max_seq_len = 32;
  options.config.vocab_size = 500;
  options.config.padded_vocab_size = 512;
  options.config.num_layers = 2;
  options.config.num_heads = 2;
  options.config.channels = 64;
  options.batch_size = 4;
  options.seq_len = 16;
  options.attention = attention;
  return options;
}

std::unique_ptr<Model> initialized_model(const ModelOptions& options, uint64_t seed) {
  std::unique_ptr<Model> model = make_cpu_model(options);
  std::vector<float> params(ParameterLayout::for_config(options.config).total);
  init_parameters(params.data(), options.config, seed);
  model->set_parameters(params.data());
  return model;
}

TEST(CpuModel, InitialLossIsLnVAndAdamWLearnsARepeatedBatch) {
  const ModelOptions options = gpt2_like_options(AttentionKind::kFlash);
  std::unique_ptr<Model> model = initialized_model(options, 42);
  EXPECT_EQ(model->device(), DeviceKind::kCpu);
  EXPECT_EQ(model->device_name().rfind("CPU (", 0), 0u) << model->device_name();
  const size_t BT = size_t(options.batch_size) * options.seq_len;
  const std::vector<int> inputs = random_tokens(BT, options.config.vocab_size, 10);
  const std::vector<int> targets = random_tokens(BT, options.config.vocab_size, 11);

  const float initial = model->evaluate(inputs.data(), targets.data());
  // GPT-2 init: logits ~ N(0, 0.02^2 C), so the loss is ln V plus about var/2 = 0.013.
  EXPECT_NEAR(initial, std::log(double(options.config.vocab_size)), 0.05);

  AdamWHyper hyper;
  hyper.lr = 1e-3f;
  hyper.weight_decay = 0.1f;
  float loss = initial;
  for (int step = 1; step <= 10; ++step) {
    model->zero_grad();
    // Two micro-batches of half weight: the same gradient as one full-weight batch.
    model->forward_backward(inputs.data(), targets.data(), 0.5f);
    loss = model->forward_backward(inputs.data(), targets.data(), 0.5f);
    const float norm = model->grad_norm();
    ASSERT_TRUE(std::isfinite(norm) && norm > 0.0f);
    model->adamw_step(hyper, step, 1.0f);
  }
  const float final_loss = model->evaluate(inputs.data(), targets.data());
  EXPECT_LT(loss, initial);
  EXPECT_LT(final_loss, initial - 0.5f) << "initial " << initial;
}

TEST(CpuModel, GradNormEvaluateAndGenerationLeaveGradients) {
  const ModelOptions options = gpt2_like_options(AttentionKind::kNaive);
  std::unique_ptr<Model> model = initialized_model(options, 1);
  CpuGpt2<float>& gpt2 = static_cast<CpuModel&>(*model).gpt2();
  const size_t BT = size_t(options.batch_size) * options.seq_len;
  const std::vector<int> inputs = random_tokens(BT, options.config.vocab_size, 12);
  const std::vector<int> targets = random_tokens(BT, options.config.vocab_size, 13);
  model->zero_grad();
  model->forward_backward(inputs.data(), targets.data(), 1.0f);
  const std::vector<float> grads(gpt2.grads(), gpt2.grads() + gpt2.num_parameters());
  double sum_sq = 0;
  for (float g : grads) sum_sq += double(g) * g;
  EXPECT_NEAR(model->grad_norm(), std::sqrt(sum_sq), 1e-6 * std::sqrt(sum_sq));
  model->evaluate(targets.data(), inputs.data());
  std::vector<float> logits(options.config.vocab_size);
  model->start_generation(1, 7);
  model->prefill(inputs.data(), 7, logits.data());
  EXPECT_TRUE(std::equal(grads.begin(), grads.end(), gpt2.grads()));
  model->zero_grad();
  EXPECT_EQ(max_abs(gpt2.grads(), gpt2.num_parameters()), 0.0);
}

TEST(CpuModel, WeightDecayOnlyOnTwoDimensionalWeights) {
  const ModelOptions options = gpt2_like_options(AttentionKind::kFlash);
  std::unique_ptr<Model> model = make_cpu_model(options);
  const ParameterLayout layout = ParameterLayout::for_config(options.config);
  std::vector<float> before(layout.total);
  fill_random(before.data(), options.config, 14, 0.5);
  model->set_parameters(before.data());
  model->zero_grad();
  // With zero gradients and zero moments the Adam term is 0/(0+eps) = 0; only decay moves.
  AdamWHyper hyper;
  hyper.lr = 0.1f;
  hyper.weight_decay = 0.5f;
  model->adamw_step(hyper, 1, 1.0f);
  std::vector<float> after(layout.total);
  model->get_parameters(after.data());
  for (int t = 0; t < kNumParamTensors; ++t) {
    for (size_t i = layout.offsets[t]; i < layout.offsets[t] + layout.sizes[t]; ++i) {
      if (ParameterLayout::decays(t))
        ASSERT_NEAR(after[i], before[i] * 0.95f, 1e-6f * std::fabs(before[i]))
            << ParameterLayout::name(t) << " " << i;
      else
        ASSERT_EQ(after[i], before[i]) << ParameterLayout::name(t) << " " << i;
    }
  }
}

TEST(CpuModel, OptimizerStateRoundTrips) {
  const ModelOptions options = gpt2_like_options(AttentionKind::kFlash);
  std::unique_ptr<Model> a = initialized_model(options, 3);
  const size_t BT = size_t(options.batch_size) * options.seq_len;
  const std::vector<int> inputs = random_tokens(BT, options.config.vocab_size, 15);
  const std::vector<int> targets = random_tokens(BT, options.config.vocab_size, 16);
  AdamWHyper hyper;
  hyper.lr = 1e-3f;
  hyper.weight_decay = 0.1f;
  for (int step = 1; step <= 2; ++step) {
    a->zero_grad();
    a->forward_backward(inputs.data(), targets.data(), 1.0f);
    a->adamw_step(hyper, step, 0.7f);
  }
  const size_t n = ParameterLayout::for_config(options.config).total;
  std::vector<float> m(n), v(n), params(n);
  a->get_optimizer_state(m.data(), v.data());
  a->get_parameters(params.data());
  EXPECT_GT(max_abs(m.data(), n), 0.0);
  EXPECT_GT(max_abs(v.data(), n), 0.0);

  // A fresh model given the parameters and moments continues exactly like the original.
  std::unique_ptr<Model> b = make_cpu_model(options);
  b->set_parameters(params.data());
  b->set_optimizer_state(m.data(), v.data());
  std::vector<float> m2(n), v2(n);
  b->get_optimizer_state(m2.data(), v2.data());
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
  for (Model* model : {a.get(), b.get()}) {
    model->zero_grad();
    model->forward_backward(inputs.data(), targets.data(), 1.0f);
    model->adamw_step(hyper, 3, 1.0f);
  }
  std::vector<float> pa(n), pb(n);
  a->get_parameters(pa.data());
  b->get_parameters(pb.data());
  EXPECT_EQ(pa, pb);
}

TEST(CpuModel, MemoryPlanIsItemizedAndExact) {
  for (AttentionKind attention : {AttentionKind::kNaive, AttentionKind::kFlash}) {
    SCOPED_TRACE(to_string(attention));
    const ModelOptions options = gpt2_like_options(attention);
    std::unique_ptr<Model> model = make_cpu_model(options);
    const MemoryPlan& plan = model->memory_plan();
    size_t sum = 0;
    for (const MemoryItem& item : plan.items) sum += item.bytes;
    EXPECT_EQ(sum, plan.total());
    const size_t param_bytes = ParameterLayout::for_config(options.config).total * sizeof(float);
    EXPECT_EQ(plan.group_total("parameters"), param_bytes);
    EXPECT_EQ(plan.group_total("gradients"), param_bytes);
    EXPECT_EQ(plan.group_total("optimizer"), 2 * param_bytes);
    EXPECT_GT(plan.group_total("activations"), 0u);
    EXPECT_EQ(plan.group_total("parameters") + plan.group_total("gradients") +
                  plan.group_total("optimizer") + plan.group_total("activations") +
                  plan.group_total("attention") + plan.group_total("workspace"),
              plan.total());
    const size_t L = options.config.num_layers, B = options.batch_size, T = options.seq_len;
    const size_t NH = options.config.num_heads, C = options.config.channels;
    size_t probs_bytes = 0, lse_bytes = 0;
    for (const MemoryItem& item : plan.items) {
      if (item.name.find("probabilities") != std::string::npos) probs_bytes = item.bytes;
      if (item.name.find("log-sum-exp") != std::string::npos) lse_bytes = item.bytes;
    }
    const size_t out_bytes = L * B * T * C * sizeof(float);
    if (attention == AttentionKind::kNaive) {
      EXPECT_EQ(probs_bytes, L * B * NH * T * T * sizeof(float));
      EXPECT_EQ(lse_bytes, 0u);
    } else {
      EXPECT_EQ(probs_bytes, 0u);
      EXPECT_EQ(lse_bytes, L * B * NH * T * sizeof(float));
    }
    EXPECT_EQ(plan.group_total("attention"), out_bytes + probs_bytes + lse_bytes);
    EXPECT_GE(model->peak_memory_bytes(), param_bytes);
  }
}

TEST(CpuModel, RefusesPlansThatDoNotFit) {
  MemoryPlan plan;
  plan.add("parameters", "parameters (fp32)", 1000);
  plan.add("attention", "attention probabilities (L,B,NH,T,T)", 5000);
  EXPECT_NO_THROW(check_memory_fits(plan, 6000, "test"));
  EXPECT_NO_THROW(check_memory_fits(plan, 0, "test"));  // unknown: no check
  try {
    check_memory_fits(plan, 5999, "test");
    ADD_FAILURE() << "a 6000-byte plan fit in 5999 bytes";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("attention probabilities (L,B,NH,T,T)"), std::string::npos) << what;
    EXPECT_NE(what.find("5000 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("5999 bytes"), std::string::npos) << what;
  }

  // gpt2 at T = 131072 with naive attention wants ~9.9 TB of probabilities: refused before
  // anything is allocated, naming that buffer.
  if (available_host_memory_bytes() == 0) GTEST_SKIP() << "/proc/meminfo has no MemAvailable";
  ModelOptions options;
  options.config = model_config_from_preset("gpt2", 131072);
  options.batch_size = 1;
  options.seq_len = 131072;
  options.attention = AttentionKind::kNaive;
  try {
    make_cpu_model(options);
    ADD_FAILURE() << "a 10 TB model was allocated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention probabilities"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("9895604649984 bytes"), std::string::npos) << e.what();
  }
}

TEST(CpuModel, RejectsBadOptions) {
  ModelOptions options = gpt2_like_options(AttentionKind::kFlash);
  options.seq_len = options.config.max_seq_len + 1;
  EXPECT_THROW(make_cpu_model(options), UsageError);
  options = gpt2_like_options(AttentionKind::kFlash);
  options.batch_size = 0;
  EXPECT_THROW(make_cpu_model(options), UsageError);
  options = gpt2_like_options(AttentionKind::kFlash);
  options.precision = Precision::kBf16;
  EXPECT_THROW(make_cpu_model(options), UsageError);
  options = gpt2_like_options(AttentionKind::kFlash);
  options.config.num_heads = 3;
  EXPECT_THROW(make_cpu_model(options), Error);
}

}  // namespace
}  // namespace gpt2
