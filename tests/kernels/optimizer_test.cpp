// Tests of kernels/cpu/adamw and kernels/cpu/global_norm: AdamW against its formula evaluated
// in double over several steps (weight decay, grad_scale != 1, t > 1); the squared norm
// against a double sum and bit-identical for 1, 2 and 3 OpenMP threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/global_norm.h"
#include "tests/kernels/kernel_test_utils.h"

namespace gpt2::cpu {
namespace {

using test::all_close;

TEST(AdamW, MatchesFormulaInDoubleOverSeveralSteps) {
  constexpr int N = 37, kSteps = 4;
  AdamWHyper hyper;
  hyper.lr = 0.05f;  // large, so the update dominates the float rounding of the parameters
  hyper.beta1 = 0.9f;
  hyper.beta2 = 0.95f;
  hyper.eps = 1e-8f;
  hyper.weight_decay = 0.1f;
  constexpr float kGradScale = 0.5f;
  std::vector<float> params = test::random_normal<float>(N, 1);
  std::vector<float> m(N, 0.f), v(N, 0.f);
  std::vector<double> ref_params(params.begin(), params.end()), ref_m(N, 0.0), ref_v(N, 0.0);
  for (int t = 1; t <= kSteps; ++t) {
    const auto grads = test::random_normal<float>(N, 100 + t);
    adamw_update(params.data(), grads.data(), m.data(), v.data(), N, hyper, t, kGradScale);
    const double beta1 = hyper.beta1, beta2 = hyper.beta2;
    for (int i = 0; i < N; ++i) {
      const double g = double(grads[i]) * kGradScale;
      ref_m[i] = beta1 * ref_m[i] + (1 - beta1) * g;
      ref_v[i] = beta2 * ref_v[i] + (1 - beta2) * g * g;
      const double m_hat = ref_m[i] / (1 - std::pow(beta1, t));
      const double v_hat = ref_v[i] / (1 - std::pow(beta2, t));
      ref_params[i] -= double(hyper.lr) * (m_hat / (std::sqrt(v_hat) + double(hyper.eps)) +
                                           double(hyper.weight_decay) * ref_params[i]);
    }
    SCOPED_TRACE("step " + std::to_string(t));
    // m and v: a few float roundings of terms up to |m| + |g| (~1), so ~1e-7 absolute where
    // beta1 m and (1 - beta1) g cancel; otherwise 1e-6 relative.
    EXPECT_TRUE(all_close(m, ref_m, 1e-6, 1e-7, "m"));
    EXPECT_TRUE(all_close(v, ref_v, 1e-6, 1e-9, "v"));
    // Each step's update is ~lr = 5e-2 and carries float error ~1e-7 relative; the parameter
    // itself rounds at ~6e-8 |p|; both stay well under 1e-6 over a few steps.
    EXPECT_TRUE(all_close(params, ref_params, 1e-6, 1e-6, "params"));
  }
}

TEST(AdamW, ZeroGradientAppliesOnlyWeightDecay) {
  AdamWHyper hyper;
  hyper.lr = 0.01f;
  hyper.weight_decay = 0.5f;
  std::vector<float> params = {2.0f, -4.0f, 0.0f}, grads(3, 0.f), m(3, 0.f), v(3, 0.f);
  adamw_update(params.data(), grads.data(), m.data(), v.data(), 3, hyper, 1, 1.0f);
  // m = v = 0 gives m_hat / (sqrt(v_hat) + eps) = 0: p -= lr * wd * p.
  EXPECT_FLOAT_EQ(params[0], 2.0f * (1 - 0.01f * 0.5f));
  EXPECT_FLOAT_EQ(params[1], -4.0f * (1 - 0.01f * 0.5f));
  EXPECT_EQ(params[2], 0.0f);
}

TEST(GlobalNorm, MatchesDoubleSumAndIsBitIdenticalForAnyThreadCount) {
  // Several 16384-element chunks plus a remainder, and sizes around the edges.
  for (const int64_t N : {int64_t{0}, int64_t{1}, int64_t{16383}, int64_t{16385},
                          int64_t{5 * 16384 + 1234}, int64_t{300001}}) {
    SCOPED_TRACE("N = " + std::to_string(N));
    const auto grads = test::random_normal<float>(static_cast<size_t>(N), 7, 1e-2);
    double expected = 0.0;
    for (const float g : grads) expected += double(g) * g;
    double results[3];
    for (int threads = 1; threads <= 3; ++threads) {
      test::ScopedThreadCount scoped(threads);
      results[threads - 1] = global_norm_squared(grads.data(), N);
    }
    EXPECT_NEAR(results[0], expected, 1e-12 * expected);
    EXPECT_EQ(std::memcmp(&results[0], &results[1], sizeof(double)), 0) << results[1];
    EXPECT_EQ(std::memcmp(&results[0], &results[2], sizeof(double)), 0) << results[2];
  }
}

}  // namespace
}  // namespace gpt2::cpu
