// base/fp16.h: half -> float against values worked out by hand and against a formula in double
// over all 65536 bit patterns.
#include "base/fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace gpt2 {
namespace {

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

TEST(Fp16, HandWorkedValues) {
  EXPECT_EQ(half_bits_to_float(0x3C00), 1.0f);
  EXPECT_EQ(half_bits_to_float(0xC000), -2.0f);
  EXPECT_EQ(half_bits_to_float(0x3800), 0.5f);
  EXPECT_EQ(half_bits_to_float(0x3555), 0.333251953125f);  // 1365/4096
  EXPECT_EQ(half_bits_to_float(0x7BFF), 65504.0f);          // largest half
  EXPECT_EQ(half_bits_to_float(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(half_bits_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(half_bits_to_float(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(half_bits_to_float(0x8200), -std::ldexp(1.0f, -15));
  EXPECT_EQ(bits_of(half_bits_to_float(0x0000)), 0u);
  EXPECT_EQ(bits_of(half_bits_to_float(0x8000)), 0x80000000u);  // -0 keeps its sign
  EXPECT_EQ(half_bits_to_float(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_bits_to_float(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(half_bits_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(half_bits_to_float(0x7C01)));  // signalling NaN stays a NaN
  EXPECT_TRUE(std::signbit(half_bits_to_float(0xFE00)));
}

// (-1)^s * 2^(e-15) * (1 + m/1024) for normals, (-1)^s * m * 2^-24 for subnormals.
TEST(Fp16, EveryFiniteHalfEqualsItsFormula) {
  for (uint32_t half = 0; half <= 0xFFFF; ++half) {
    const int exponent = (half >> 10) & 0x1F;
    if (exponent == 0x1F) continue;
    const double mantissa = half & 0x3FF;
    const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24)
                                           : std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
    const double expected = (half & 0x8000) ? -magnitude : magnitude;
    ASSERT_EQ(static_cast<double>(half_bits_to_float(static_cast<uint16_t>(half))), expected)
        << std::hex << half;
  }
}

}  // namespace
}  // namespace gpt2
