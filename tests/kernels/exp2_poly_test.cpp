// exp2_poly (kernels/common/exp2_poly.h), the attention forward's FMA-pipe exponential: its
// relative error against 2^x in double over the softmax's range, at most the bound the header
// states, on every 61st float of [-125, 0] and densely around the points where the minimax
// error peaks (the ends of each unit interval, where f = +-1/2, and f = 0); exactly 0 below
// -125 and at -inf; 2^-n times the value at x for x - n, whole n (the polynomial sees only f).
#include "kernels/common/exp2_poly.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace gpt2 {
namespace {

using exp2_poly_detail::same_bits;  // the header's bit cast (host code here)

double relative_error(float got, float x) {
  const double want = std::exp2(static_cast<double>(x));
  return std::fabs(static_cast<double>(got) - want) / want;
}

template <int kDegree>
void check_bound() {
  double worst = 0.0;
  float worst_x = 0.0f;
  auto check = [&](float x) {
    const double error = relative_error(exp2_poly<kDegree>(x), x);
    if (error > worst) worst = error, worst_x = x;
  };
  // Every 61st float from -0 down to -125 (negative floats grow in magnitude with their bits).
  for (uint32_t bits = same_bits<uint32_t>(-0.0f); bits <= same_bits<uint32_t>(-125.0f);
       bits += 61)
    check(same_bits<float>(bits));
  // Around f = -1/2, 0 and 1/2 of every unit interval: 2048 floats each side.
  for (int n = -125; n <= 0; ++n) {
    for (const float centre : {n - 0.5f, static_cast<float>(n), n + 0.5f}) {
      if (centre > 0.0f || centre < -125.0f) continue;
      float below = centre, above = centre;
      for (int i = 0; i < 2048; ++i) {
        check(below);
        if (above <= 0.0f) check(above);
        below = std::nextafter(below, -std::numeric_limits<float>::infinity());
        above = std::nextafter(above, std::numeric_limits<float>::infinity());
        if (below < -125.0f) break;
      }
    }
  }
  EXPECT_LE(worst, kExp2PolyBound<kDegree>) << "degree " << kDegree << ": worst at x = "
                                            << worst_x;
  // The bound is not loose by much: the minimax error itself is reached within 10%.
  EXPECT_GE(worst, 0.9 * (kDegree == 3 ? 7.478e-5 : 2.593e-6)) << "degree " << kDegree;
}

TEST(Exp2Poly, Degree3WithinItsBound) { check_bound<3>(); }

TEST(Exp2Poly, Degree4WithinItsBound) { check_bound<4>(); }

TEST(Exp2Poly, BelowTheNormalRangeAndMaskedScoresGiveZero) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const float x : {-inf, -1e30f, -126.0f, std::nextafter(-125.0f, -inf)}) {
    EXPECT_EQ(exp2_poly<3>(x), 0.0f) << x;
    EXPECT_EQ(exp2_poly<4>(x), 0.0f) << x;
  }
  EXPECT_GT(exp2_poly<3>(-125.0f), 0.0f);
  EXPECT_TRUE(std::isnormal(exp2_poly<3>(-125.0f)));
  EXPECT_TRUE(std::isnormal(exp2_poly<4>(-125.0f)));
}

TEST(Exp2Poly, WholeStepsScaleByPowersOfTwoExactly) {
  // Dyadic f (x = f - n is then exact) away from the rounding ties at halves.
  for (const float f : {0.0f, -0.125f, -0.25f, -0.3125f, -0.4375f, -0.75f, -0.9375f}) {
    const float at = exp2_poly<3>(f);
    for (int n = 1; n <= 100; ++n)
      EXPECT_EQ(exp2_poly<3>(f - static_cast<float>(n)), std::ldexp(at, -n)) << f << " - " << n;
  }
}

}  // namespace
}  // namespace gpt2
