// Tests of kernels/cpu/layernorm: forward against a double reference, every gradient against
// finite differences (double), the += contract of all three gradients, and thread-count
// independence.
#include "kernels/cpu/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <vector>

#include "tests/kernels/kernel_test_utils.h"

namespace gpt2::cpu {
namespace {

using test::all_close;
using test::numeric_gradient;
using test::random_normal;

struct LayerNormShape {
  int B, T, C;
};

void PrintTo(const LayerNormShape& s, std::ostream* os) {
  *os << "B=" << s.B << " T=" << s.T << " C=" << s.C;
}

class LayerNormTest : public ::testing::TestWithParam<LayerNormShape> {};

TEST_P(LayerNormTest, ForwardMatchesDefinition) {
  const LayerNormShape shape = GetParam();
  const int B = shape.B, T = shape.T, C = shape.C, BT = B * T;
  // An offset mean and a large scale, where a one-pass variance would lose digits.
  auto inp = random_normal<float>(BT * C, 1, 3.0);
  for (auto& x : inp) x += 100.0f;
  const auto weight = random_normal<float>(C, 2);
  const auto bias = random_normal<float>(C, 3);
  auto out = test::poisoned<float>(BT * C), mean = test::poisoned<float>(BT),
       rstd = test::poisoned<float>(BT);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                    B, T, C);
  std::vector<double> out_ref(BT * C), mean_ref(BT), rstd_ref(BT);
  for (int bt = 0; bt < BT; ++bt) {
    double m = 0.0, var = 0.0;
    for (int c = 0; c < C; ++c) m += inp[bt * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) var += (inp[bt * C + c] - m) * (inp[bt * C + c] - m);
    var /= C;
    mean_ref[bt] = m;
    rstd_ref[bt] = 1.0 / std::sqrt(var + kLayerNormEps);
    for (int c = 0; c < C; ++c)
      out_ref[bt * C + c] = (inp[bt * C + c] - m) * rstd_ref[bt] * weight[c] + bias[c];
  }
  EXPECT_TRUE(all_close(mean, mean_ref, 1e-7, 0.0, "mean"));
  EXPECT_TRUE(all_close(rstd, rstd_ref, 1e-6, 0.0, "rstd"));
  EXPECT_TRUE(all_close(out, out_ref, 1e-5, 1e-5, "out"));
}

TEST_P(LayerNormTest, GradientsMatchFiniteDifferencesAndAccumulate) {
  const LayerNormShape shape = GetParam();
  const int B = shape.B, T = shape.T, C = shape.C, BT = B * T;
  std::vector<double> inp = random_normal<double>(BT * C, 11);
  std::vector<double> weight = random_normal<double>(C, 12);
  std::vector<double> bias = random_normal<double>(C, 13);
  const auto dout = random_normal<double>(BT * C, 14);
  std::vector<double> out(BT * C), mean(BT), rstd(BT);
  auto objective = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                      bias.data(), B, T, C);
    return test::weighted_sum(out, dout);
  };
  objective();  // mean and rstd at the unperturbed point, for the backward
  const auto dinp0 = random_normal<double>(BT * C, 15);
  const auto dweight0 = random_normal<double>(C, 16);
  const auto dbias0 = random_normal<double>(C, 17);
  auto dinp = dinp0, dweight = dweight0, dbias = dbias0;
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                     weight.data(), mean.data(), rstd.data(), B, T, C);
  constexpr double kRtol = 1e-6, kAtol = 1e-7;
  EXPECT_TRUE(all_close(test::difference(dinp, dinp0), numeric_gradient(inp, objective), kRtol,
                        kAtol, "dinp - dinp0 (+=)"));
  EXPECT_TRUE(all_close(test::difference(dweight, dweight0), numeric_gradient(weight, objective),
                        kRtol, kAtol, "dweight - dweight0 (+=)"));
  EXPECT_TRUE(all_close(test::difference(dbias, dbias0), numeric_gradient(bias, objective), kRtol,
                        kAtol, "dbias - dbias0 (+=)"));
}

INSTANTIATE_TEST_SUITE_P(OddShapes, LayerNormTest,
                         ::testing::Values(LayerNormShape{1, 1, 7}, LayerNormShape{2, 3, 5},
                                           LayerNormShape{1, 17, 70}, LayerNormShape{2, 3, 131}));

TEST(LayerNorm, BitIdenticalForAnyThreadCount) {
  constexpr int B = 2, T = 97, C = 200;  // above the parallel threshold, 4 channel strips
  const int BT = B * T;
  const auto inp = random_normal<float>(BT * C, 21);
  const auto weight = random_normal<float>(C, 22);
  const auto bias = random_normal<float>(C, 23);
  const auto dout = random_normal<float>(BT * C, 24);
  std::vector<std::vector<float>> results[2];
  for (int run = 0; run < 2; ++run) {
    test::ScopedThreadCount threads(test::kThreadCountsToCompare[run]);
    std::vector<float> out(BT * C), mean(BT), rstd(BT), dinp(BT * C, 0.f), dweight(C, 0.f),
        dbias(C, 0.f);
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                      bias.data(), B, T, C);
    layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                       weight.data(), mean.data(), rstd.data(), B, T, C);
    results[run] = {out, mean, rstd, dinp, dweight, dbias};
  }
  const char* names[] = {"out", "mean", "rstd", "dinp", "dweight", "dbias"};
  for (int i = 0; i < 6; ++i)
    EXPECT_TRUE(test::bit_identical(results[0][i], results[1][i], names[i]));
}

}  // namespace
}  // namespace gpt2::cpu
