// base/bf16.h: the host bf16 conversion against hand-worked bit patterns.
#include "base/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace gpt2 {
namespace {

float from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

TEST(Bf16, RoundsToNearestEvenAndWidensExactly) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3F80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3F808000u)), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3F818000u)), 0x3F82);
  // Just above the halfway point rounds up.
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(float_to_bf16_bits(-2.5f), 0xC020);
  for (const uint16_t bits : {0x0000, 0x8000, 0x3F80, 0x0001, 0x7F7F, 0xFF7F, 0x7F80}) {
    EXPECT_EQ(float_to_bf16_bits(bf16_bits_to_float(bits)), bits) << bits;
  }
  EXPECT_EQ(bf16_bits_to_float(0x4049), 3.140625f);
}

TEST(Bf16, NonFiniteValuesStayWhatTheyAre) {
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16_bits(-std::numeric_limits<float>::infinity()), 0xFF80);
  // The largest finite floats round up to infinity, as on the device.
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7F80);
  // A NaN whose payload lives only in the low 16 bits would truncate to infinity.
  const uint16_t nan = float_to_bf16_bits(from_bits(0x7F800001u));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(nan))) << nan;
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(-std::nanf("")))));
  EXPECT_TRUE(std::signbit(bf16_bits_to_float(float_to_bf16_bits(-std::nanf("")))));
}

}  // namespace
}  // namespace gpt2
