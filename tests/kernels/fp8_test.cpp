// FP8 on the host (kernels/cpu/fp8.h): the formats' values, rounding to nearest even between
// every pair of neighbours, saturation and underflow as CUDA's __NV_SATFINITE conversion does,
// the cast-transpose-amax pass at odd shapes, and the delayed scale's history, margin, power of
// two and the amaxes it must not scale by. (tests/gpu/fp8_host_test.cpp checks the encoding
// against CUDA's own host conversion, bit for bit.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "base/rng.h"
#include "kernels/cpu/fp8.h"

namespace gpt2::cpu {
namespace {

constexpr Fp8Format kFormats[] = {Fp8Format::kE4M3, Fp8Format::kE5M2};

TEST(Fp8, KnownCodesDecodeToTheirValues) {
  const Fp8Format e4 = Fp8Format::kE4M3, e5 = Fp8Format::kE5M2;
  EXPECT_EQ(fp8_decode(0x00, e4), 0.0f);
  EXPECT_EQ(fp8_decode(0x01, e4), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_decode(0x07, e4), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_decode(0x08, e4), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_decode(0x38, e4), 1.0f);
  EXPECT_EQ(fp8_decode(0x7E, e4), 448.0f);
  EXPECT_EQ(fp8_decode(0xFE, e4), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7F, e4)));
  EXPECT_TRUE(std::isnan(fp8_decode(0xFF, e4)));
  EXPECT_EQ(fp8_decode(0x3C, e5), 1.0f);
  EXPECT_EQ(fp8_decode(0x01, e5), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_decode(0x04, e5), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8_decode(0x7B, e5), 57344.0f);
  EXPECT_EQ(fp8_decode(0x7C, e5), INFINITY);
  EXPECT_EQ(fp8_decode(0xFC, e5), -INFINITY);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7D, e5)));
  EXPECT_EQ(fp8_max(e4), 448.0f);
  EXPECT_EQ(fp8_max(e5), 57344.0f);
}

// Every finite code comes back from its own value; the positive finite values increase with the
// code, and each midpoint between neighbours rounds to the one with an even code.
TEST(Fp8, EveryValueRoundTripsAndMidpointsRoundToEven) {
  for (const Fp8Format format : kFormats) {
    SCOPED_TRACE(to_string(format));
    std::vector<float> positives;
    for (int code = 0; code < 256; ++code) {
      const float value = fp8_decode(static_cast<uint8_t>(code), format);
      if (!std::isfinite(value)) continue;
      EXPECT_EQ(fp8_encode(value, format), code) << "code " << code << " value " << value;
      if (code < 0x80) positives.push_back(value);
    }
    for (size_t i = 0; i + 1 < positives.size(); ++i) {
      const float low = positives[i], high = positives[i + 1];
      ASSERT_LT(low, high) << "code " << i;
      const float mid = 0.5f * (low + high);  // exact: the values have few bits
      const uint8_t even = (i % 2 == 0) ? static_cast<uint8_t>(i) : static_cast<uint8_t>(i + 1);
      EXPECT_EQ(fp8_encode(mid, format), even) << low << " .. " << high;
      EXPECT_EQ(fp8_encode(std::nextafter(mid, 0.0f), format), i);
      EXPECT_EQ(fp8_encode(std::nextafter(mid, INFINITY), format), i + 1);
      EXPECT_EQ(fp8_encode(-mid, format), even | 0x80);
    }
  }
}

TEST(Fp8, OutOfRangeSaturatesAndTinyValuesUnderflowToSignedZero) {
  const Fp8Format e4 = Fp8Format::kE4M3, e5 = Fp8Format::kE5M2;
  for (const float big : {449.0f, 464.0f, 465.0f, 1e30f, INFINITY})
    EXPECT_EQ(fp8_encode(big, e4), 0x7E) << big;
  EXPECT_EQ(fp8_encode(-INFINITY, e4), 0xFE);
  for (const float big : {61439.0f, 61440.0f, 1e30f, INFINITY})
    EXPECT_EQ(fp8_encode(big, e5), 0x7B) << big;
  EXPECT_EQ(fp8_encode(-1e30f, e5), 0xFB);
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -10), e4), 0x00);  // half the smallest subnormal: even
  EXPECT_EQ(fp8_encode(std::nextafter(std::ldexp(1.0f, -10), 1.0f), e4), 0x01);
  EXPECT_EQ(fp8_encode(-std::ldexp(1.0f, -12), e4), 0x80);
  EXPECT_EQ(fp8_encode(-0.0f, e5), 0x80);
  EXPECT_EQ(fp8_encode(std::numeric_limits<float>::denorm_min(), e5), 0x00);
  EXPECT_EQ(fp8_encode(NAN, e4), 0x7F);
  EXPECT_EQ(fp8_encode(-NAN, e5), 0x7F);
}

TEST(Fp8, CastTransposeWritesBothOrdersAndTheFiniteAmax) {
  for (const Fp8Format format : kFormats) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{3, 5}, {17, 1}, {1, 9}, {7, 13}}) {
      Rng rng(static_cast<uint64_t>(rows * 100 + cols));
      std::vector<float> in(static_cast<size_t>(rows * cols));
      for (float& x : in) x = static_cast<float>(3.0 * rng.normal());
      in[0] = NAN;  // neither counted in amax nor anything but NaN's code
      if (in.size() > 2) in[2] = -INFINITY;
      const float scale = 5.0f;
      std::vector<uint8_t> out(in.size(), 0xAA), out_t(in.size(), 0xAA);
      float amax = -1.0f;
      fp8_cast_transpose(in.data(), rows, cols, scale, format, out.data(), out_t.data(), &amax);
      float want_amax = 0.0f;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const float x = in[static_cast<size_t>(r * cols + c)];
          if (std::isfinite(x)) want_amax = std::max(want_amax, std::fabs(x));
          const uint8_t want = fp8_encode(x * scale, format);
          EXPECT_EQ(out[static_cast<size_t>(r * cols + c)], want) << r << "," << c;
          EXPECT_EQ(out_t[static_cast<size_t>(c * rows + r)], want) << r << "," << c;
        }
      }
      EXPECT_EQ(amax, want_amax) << rows << "x" << cols;
    }
  }
}

TEST(Fp8, DelayedScaleFollowsTheHistoryAndKeepsItselfOnBadAmaxes) {
  Fp8Scale exact(Fp8Format::kE4M3, 3, 0, /*power_of_two=*/false);
  EXPECT_EQ(exact.scale(), 1.0f);
  exact.record(4.0f);
  EXPECT_FLOAT_EQ(exact.scale(), 448.0f / 4.0f);
  exact.record(8.0f);
  EXPECT_FLOAT_EQ(exact.scale(), 448.0f / 8.0f);  // the history's largest
  exact.record(1.0f);
  exact.record(1.0f);
  EXPECT_FLOAT_EQ(exact.scale(), 448.0f / 8.0f);  // 8 is still among the last 3
  exact.record(2.0f);
  EXPECT_FLOAT_EQ(exact.scale(), 448.0f / 2.0f);  // now it is not
  Fp8Scale only_bad(Fp8Format::kE5M2, 2, 0, false);
  only_bad.record(NAN);
  only_bad.record(0.0f);
  EXPECT_EQ(only_bad.scale(), 1.0f);  // no finite positive amax: nothing to scale by
  exact.record(INFINITY);
  exact.record(NAN);
  EXPECT_EQ(exact.scale(), 448.0f / 2.0f);  // the finite one in the history still counts
  // An amax so small that the scale would overflow float keeps the previous scale.
  Fp8Scale tiny(Fp8Format::kE5M2, 1, 0, false);
  tiny.record(1.0f);
  tiny.record(std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(tiny.scale(), 57344.0f);
  // Margin and powers of two: the largest power of two within fp8_max / amax / 2^margin, so
  // amax * scale never exceeds the format's range.
  Fp8Scale rounded(Fp8Format::kE4M3, 1, 1, true);
  rounded.record(3.0f);  // 448 / 3 / 2 = 74.67 -> 64
  EXPECT_EQ(rounded.scale(), 64.0f);
  EXPECT_EQ(rounded.inverse(), 1.0f / 64.0f);
  for (const float amax : {1e-6f, 0.37f, 1.0f, 300.0f, 1e6f}) {
    Fp8Scale scale(Fp8Format::kE4M3, 1);
    scale.record(amax);
    EXPECT_LE(amax * scale.scale(), 448.0f) << amax;
    EXPECT_GT(amax * scale.scale() * 2, 448.0f) << amax;
  }
}

// A use saturates when its amax at the scale it was cast with passes the largest finite value:
// a delayed scale lagging a tensor that grew. At its own scale an amax never saturates; one
// that is not finite says nothing.
TEST(Fp8, SaturationIsAnAmaxBeyondTheRangeAtTheScaleInUse) {
  Fp8Scale delayed(Fp8Format::kE4M3, 4);  // power-of-two scales, margin 0
  EXPECT_FALSE(delayed.saturates(448.0f));   // scale 1: at the largest finite value
  EXPECT_TRUE(delayed.saturates(449.0f));
  delayed.record(3.0f);                      // 448 / 3 -> 128
  EXPECT_EQ(delayed.scale(), 128.0f);
  EXPECT_FALSE(delayed.saturates(3.0f));
  EXPECT_FALSE(delayed.saturates(3.5f));     // 448: the power of two's headroom
  EXPECT_TRUE(delayed.saturates(3.6f));      // 460.8
  EXPECT_FALSE(delayed.saturates(INFINITY));
  EXPECT_FALSE(delayed.saturates(NAN));
  Fp8Scale gradients(Fp8Format::kE5M2, 1, 0, true, 32768.0f);
  EXPECT_FALSE(gradients.saturates(1.75f));  // 57344
  EXPECT_TRUE(gradients.saturates(1.76f));
}

}  // namespace
}  // namespace gpt2::cpu
