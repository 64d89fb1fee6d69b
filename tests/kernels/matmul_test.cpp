// Tests of kernels/cpu/matmul: gradients against finite differences (double), the = / +=
// contracts and nullptr options, float accuracy against a double reference on shapes that
// cross the task and K-chunk boundaries, and bit-identical results for any thread count.
#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <vector>

#include "tests/kernels/kernel_test_utils.h"

namespace gpt2::cpu {
namespace {

using test::all_close;
using test::convert;
using test::numeric_gradient;
using test::random_normal;
using test::weighted_sum;

struct MatmulShape {
  int B, T, C, OC;
};

void PrintTo(const MatmulShape& s, std::ostream* os) {
  *os << "B=" << s.B << " T=" << s.T << " C=" << s.C << " OC=" << s.OC;
}

// out = inp weight^T + bias, and the row-sums of |inp * weight| (the scale of the rounding
// error of a float dot product), all in double.
void reference_forward(const std::vector<double>& inp, const std::vector<double>& weight,
                       const double* bias, int BT, int C, int OC, std::vector<double>& out,
                       std::vector<double>& magnitude) {
  out.assign(static_cast<size_t>(BT) * OC, 0.0);
  magnitude.assign(out.size(), 0.0);
  for (int bt = 0; bt < BT; ++bt) {
    for (int o = 0; o < OC; ++o) {
      double sum = bias ? bias[o] : 0.0, mag = bias ? std::fabs(bias[o]) : 0.0;
      for (int i = 0; i < C; ++i) {
        sum += inp[bt * C + i] * weight[o * C + i];
        mag += std::fabs(inp[bt * C + i] * weight[o * C + i]);
      }
      out[bt * OC + o] = sum;
      magnitude[bt * OC + o] = mag;
    }
  }
}

class MatmulGradient : public ::testing::TestWithParam<MatmulShape> {};

TEST_P(MatmulGradient, MatchesFiniteDifferencesInDouble) {
  const MatmulShape shape = GetParam();
  const int B = shape.B, T = shape.T, C = shape.C, OC = shape.OC, BT = B * T;
  std::vector<double> inp = random_normal<double>(BT * C, 1);
  std::vector<double> weight = random_normal<double>(OC * C, 2);
  std::vector<double> bias = random_normal<double>(OC, 3);
  const std::vector<double> dout = random_normal<double>(BT * OC, 4);  // R in L = sum(out * R)
  std::vector<double> out(BT * OC);
  auto objective = [&] {
    matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), B, T, C, OC);
    return weighted_sum(out, dout);
  };

  // dinp is overwritten (poison), dweight and dbias accumulate onto known values.
  std::vector<double> dinp = test::poisoned<double>(BT * C);
  const std::vector<double> dweight0 = random_normal<double>(OC * C, 5);
  const std::vector<double> dbias0 = random_normal<double>(OC, 6);
  std::vector<double> dweight = dweight0, dbias = dbias0;
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                  weight.data(), B, T, C, OC);

  constexpr double kRtol = 1e-6, kAtol = 1e-7;
  EXPECT_TRUE(all_close(dinp, numeric_gradient(inp, objective), kRtol, kAtol, "dinp"));
  EXPECT_TRUE(all_close(test::difference(dweight, dweight0), numeric_gradient(weight, objective),
                        kRtol, kAtol, "dweight - dweight0"));
  EXPECT_TRUE(all_close(test::difference(dbias, dbias0), numeric_gradient(bias, objective), kRtol,
                        kAtol, "dbias - dbias0"));
}

INSTANTIATE_TEST_SUITE_P(OddShapes, MatmulGradient,
                         ::testing::Values(MatmulShape{1, 1, 3, 5}, MatmulShape{2, 3, 7, 5},
                                           MatmulShape{1, 17, 5, 9}, MatmulShape{2, 3, 37, 35}));

TEST(Matmul, BackwardTwiceDoublesParameterGradientsAndRewritesDinp) {
  constexpr int B = 2, T = 3, C = 5, OC = 7;
  const auto inp = random_normal<double>(B * T * C, 11);
  const auto weight = random_normal<double>(OC * C, 12);
  const auto dout = random_normal<double>(B * T * OC, 13);
  std::vector<double> dinp1(B * T * C), dweight1(OC * C, 0.0), dbias1(OC, 0.0);
  matmul_backward(dinp1.data(), dweight1.data(), dbias1.data(), dout.data(), inp.data(),
                  weight.data(), B, T, C, OC);
  std::vector<double> dinp2 = dinp1, dweight2 = dweight1, dbias2 = dbias1;
  matmul_backward(dinp2.data(), dweight2.data(), dbias2.data(), dout.data(), inp.data(),
                  weight.data(), B, T, C, OC);
  std::vector<double> twice_dweight(dweight1), twice_dbias(dbias1);
  for (auto& x : twice_dweight) x *= 2;
  for (auto& x : twice_dbias) x *= 2;
  EXPECT_TRUE(all_close(dinp2, dinp1, 0.0, 0.0, "dinp after the second call (=)"));
  EXPECT_TRUE(all_close(dweight2, twice_dweight, 1e-15, 0.0, "dweight after two calls (+=)"));
  EXPECT_TRUE(all_close(dbias2, twice_dbias, 1e-15, 0.0, "dbias after two calls (+=)"));
}

TEST(Matmul, NullBiasAndSkippedGradients) {
  constexpr int B = 1, T = 4, C = 6, OC = 5;
  const auto inp = random_normal<double>(B * T * C, 21);
  const auto weight = random_normal<double>(OC * C, 22);
  const auto dout = random_normal<double>(B * T * OC, 23);
  std::vector<double> out = test::poisoned<double>(B * T * OC), expected, magnitude;
  matmul_forward(out.data(), inp.data(), weight.data(), static_cast<const double*>(nullptr), B,
                 T, C, OC);
  reference_forward(inp, weight, nullptr, B * T, C, OC, expected, magnitude);
  EXPECT_TRUE(all_close(out, expected, 1e-13, 1e-13, "out without bias"));

  // dinp == nullptr and dbias == nullptr: dweight must still be the full gradient.
  std::vector<double> dweight_all(OC * C, 0.0), dweight_only(OC * C, 0.0), dinp(B * T * C),
      dbias(OC, 0.0);
  matmul_backward(dinp.data(), dweight_all.data(), dbias.data(), dout.data(), inp.data(),
                  weight.data(), B, T, C, OC);
  matmul_backward(static_cast<double*>(nullptr), dweight_only.data(),
                  static_cast<double*>(nullptr), dout.data(), inp.data(), weight.data(), B, T, C,
                  OC);
  EXPECT_TRUE(all_close(dweight_only, dweight_all, 0.0, 0.0, "dweight with nullptr dinp/dbias"));
}

// Float forward and backward against double references on shapes larger than one task tile
// and one K chunk. Bound: recursive float summation of n terms errs by at most about
// n * 2^-24 * sum |terms| (Higham's gamma_n); double-accumulated sums only by the final rounding.
TEST(Matmul, FloatMatchesDoubleReferenceAcrossBlocks) {
  constexpr int B = 2, T = 67, C = 300, OC = 133;  // BT = 134 rows; C > one K chunk
  const int BT = B * T;
  const auto inp = random_normal<float>(BT * C, 31);
  const auto weight = random_normal<float>(OC * C, 32);
  const auto bias = random_normal<float>(OC, 33);
  const auto dout = random_normal<float>(BT * OC, 34);
  const double u = std::ldexp(1.0, -24);

  std::vector<float> out = test::poisoned<float>(BT * OC);
  matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), B, T, C, OC);
  std::vector<double> expected, magnitude;
  const auto bias_d = convert<double>(bias);
  reference_forward(convert<double>(inp), convert<double>(weight), bias_d.data(), BT, C, OC,
                    expected, magnitude);
  for (size_t i = 0; i < out.size(); ++i) {
    const double bound = (C + 2) * u * magnitude[i];
    ASSERT_LE(std::fabs(out[i] - expected[i]), bound) << "out[" << i << "]";
  }

  std::vector<float> dinp = test::poisoned<float>(BT * C), dweight(OC * C, 0.5f), dbias(OC, -1.f);
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                  weight.data(), B, T, C, OC);
  for (int bt = 0; bt < BT; ++bt) {
    for (int i = 0; i < C; ++i) {
      double sum = 0.0, mag = 0.0;
      for (int o = 0; o < OC; ++o) {
        sum += double(dout[bt * OC + o]) * weight[o * C + i];
        mag += std::fabs(double(dout[bt * OC + o]) * weight[o * C + i]);
      }
      ASSERT_LE(std::fabs(dinp[bt * C + i] - sum), (OC + 1) * u * mag) << "dinp " << bt << "," << i;
    }
  }
  for (int o = 0; o < OC; ++o) {
    double bias_sum = -1.0;
    for (int bt = 0; bt < BT; ++bt) bias_sum += dout[bt * OC + o];
    ASSERT_LE(std::fabs(dbias[o] - bias_sum), 2 * u * (std::fabs(bias_sum) + 1) + 1e-12) << o;
    for (int i = 0; i < C; ++i) {
      double sum = 0.0;
      for (int bt = 0; bt < BT; ++bt) sum += double(dout[bt * OC + o]) * inp[bt * C + i];
      const double expected_dw = 0.5 + static_cast<double>(static_cast<float>(sum));
      ASSERT_LE(std::fabs(dweight[o * C + i] - expected_dw), 2 * u * (std::fabs(expected_dw) + 1))
          << "dweight " << o << "," << i;
    }
  }
}

TEST(Matmul, BitIdenticalForAnyThreadCount) {
  constexpr int B = 2, T = 67, C = 300, OC = 133;
  const int BT = B * T;
  const auto inp = random_normal<float>(BT * C, 41);
  const auto weight = random_normal<float>(OC * C, 42);
  const auto bias = random_normal<float>(OC, 43);
  const auto dout = random_normal<float>(BT * OC, 44);
  std::vector<std::vector<float>> results[2];
  for (int run = 0; run < 2; ++run) {
    test::ScopedThreadCount threads(test::kThreadCountsToCompare[run]);
    std::vector<float> out(BT * OC), dinp(BT * C), dweight(OC * C, 0.f), dbias(OC, 0.f);
    matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), B, T, C, OC);
    matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                    weight.data(), B, T, C, OC);
    results[run] = {out, dinp, dweight, dbias};
  }
  const char* names[] = {"out", "dinp", "dweight", "dbias"};
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(test::bit_identical(results[0][i], results[1][i], names[i]));
}

}  // namespace
}  // namespace gpt2::cpu
