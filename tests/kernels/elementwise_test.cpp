// Tests of the elementwise ops kernels/cpu/gelu and kernels/cpu/residual: forward by
// definition, gradients against finite differences (double), and the = / += contracts.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/gelu.h"
#include "kernels/cpu/residual.h"
#include "tests/kernels/kernel_test_utils.h"

namespace gpt2::cpu {
namespace {

using test::all_close;
using test::numeric_gradient;

TEST(Gelu, ForwardMatchesTanhFormulaAndLimits) {
  const std::vector<double> inp = {-30.0, -3.0, -1.0, -0.25, 0.0, 0.25, 1.0, 3.0, 30.0};
  std::vector<double> out = test::poisoned<double>(inp.size());
  gelu_forward(out.data(), inp.data(), static_cast<int64_t>(inp.size()));
  std::vector<double> expected(inp.size());
  for (size_t i = 0; i < inp.size(); ++i) {
    const double x = inp[i];
    expected[i] = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  EXPECT_TRUE(all_close(out, expected, 1e-15, 1e-300, "gelu(x)"));
  EXPECT_EQ(out[4], 0.0);              // gelu(0) = 0
  EXPECT_EQ(out[8], 30.0);             // identity far right
  EXPECT_NEAR(out[0], 0.0, 1e-300);    // zero far left
}

TEST(Gelu, BackwardMatchesFiniteDifferencesAndOverwrites) {
  constexpr int N = 257;
  std::vector<double> inp = test::random_uniform<double>(N, 1, -6.0, 6.0);
  const auto dout = test::random_normal<double>(N, 2);
  std::vector<double> out(N);
  auto objective = [&] {
    gelu_forward(out.data(), inp.data(), N);
    return test::weighted_sum(out, dout);
  };
  std::vector<double> dinp = test::poisoned<double>(N);
  gelu_backward(dinp.data(), inp.data(), dout.data(), N);
  EXPECT_TRUE(all_close(dinp, numeric_gradient(inp, objective), 1e-6, 1e-7, "dinp"));
}

TEST(Gelu, FloatMatchesDouble) {
  constexpr int N = 1000;
  const auto inp = test::random_uniform<float>(N, 3, -8.0, 8.0);
  const auto dout = test::random_normal<float>(N, 4);
  std::vector<float> out(N), dinp(N);
  gelu_forward(out.data(), inp.data(), N);
  gelu_backward(dinp.data(), inp.data(), dout.data(), N);
  const auto inp_d = test::convert<double>(inp), dout_d = test::convert<double>(dout);
  std::vector<double> out_d(N), dinp_d(N);
  gelu_forward(out_d.data(), inp_d.data(), N);
  gelu_backward(dinp_d.data(), inp_d.data(), dout_d.data(), N);
  // For x << 0, 1 + tanh(u) and 1 - tanh(u)^2 cancel to ulp(1) ~ 1.2e-7 in float; scaled by
  // 0.5 |x| (forward, <= 4) and by |x| du/dx |dout| (backward, ~150 at |x| = 8) that is the
  // absolute error floor of the tanh form in float.
  EXPECT_TRUE(all_close(out, out_d, 1e-5, 1e-6, "float vs double forward"));
  EXPECT_TRUE(all_close(dinp, dinp_d, 1e-5, 2e-5, "float vs double backward"));
}

TEST(Residual, ForwardAndAccumulatingBackward) {
  constexpr int N = 37;
  std::vector<double> inp1 = test::random_normal<double>(N, 11);
  std::vector<double> inp2 = test::random_normal<double>(N, 12);
  const auto dout = test::random_normal<double>(N, 13);
  std::vector<double> out = test::poisoned<double>(N);
  auto objective = [&] {
    residual_forward(out.data(), inp1.data(), inp2.data(), N);
    return test::weighted_sum(out, dout);
  };
  objective();
  for (int i = 0; i < N; ++i) ASSERT_EQ(out[i], inp1[i] + inp2[i]) << i;
  const auto dinp1_0 = test::random_normal<double>(N, 14);
  const auto dinp2_0 = test::random_normal<double>(N, 15);
  auto dinp1 = dinp1_0, dinp2 = dinp2_0;
  residual_backward(dinp1.data(), dinp2.data(), dout.data(), N);
  EXPECT_TRUE(all_close(test::difference(dinp1, dinp1_0), numeric_gradient(inp1, objective),
                        1e-6, 1e-7, "dinp1 - dinp1_0 (+=)"));
  EXPECT_TRUE(all_close(test::difference(dinp2, dinp2_0), numeric_gradient(inp2, objective),
                        1e-6, 1e-7, "dinp2 - dinp2_0 (+=)"));
}

}  // namespace
}  // namespace gpt2::cpu
