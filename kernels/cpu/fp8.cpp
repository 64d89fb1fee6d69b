/**
 * @file fp8.cpp
 * @brief FP8 formats, conversions, cast-transpose-amax and delayed scales (fp8.h).
 *
 * Encoding in double: the value's quantum at its binade (or at the smallest normal binade, for
 * subnormals) is a power of two, so a / quantum is exact and std::nearbyint rounds it to the
 * nearest integer, ties to even (the default rounding mode).
 */
#include "kernels/cpu/fp8.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace gpt2::cpu {
namespace {

struct Layout {
  int mantissa_bits;
  int bias;
  float max_finite;
};

Layout layout(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? Layout{3, 7, 448.0f} : Layout{2, 15, 57344.0f};
}

}  // namespace

const char* to_string(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? "e4m3" : "e5m2";
}

float fp8_max(Fp8Format format) { return layout(format).max_finite; }

uint8_t fp8_encode(float x, Fp8Format format) {
  if (std::isnan(x)) return 0x7F;
  const Layout f = layout(format);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  const int min_exponent = 1 - f.bias;  // of the smallest normal binade
  double rounded = f.max_finite;
  if (a < static_cast<double>(f.max_finite) * 2) {  // infinities and far values saturate
    int exponent = 0;
    (void)std::frexp(a, &exponent);  // a = m 2^exponent, m in [0.5, 1)
    const double quantum =
        std::ldexp(1.0, std::max(exponent - 1, min_exponent) - f.mantissa_bits);
    rounded = std::min(std::nearbyint(a / quantum) * quantum, double(f.max_finite));
  }
  if (rounded == 0.0) return sign;
  int exponent = 0;
  (void)std::frexp(rounded, &exponent);
  const int binade = exponent - 1;
  if (binade < min_exponent) {  // subnormal: exponent field 0
    const double units = rounded / std::ldexp(1.0, min_exponent - f.mantissa_bits);
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(units));
  }
  const double mantissa = rounded / std::ldexp(1.0, binade - f.mantissa_bits) -
                          std::ldexp(1.0, f.mantissa_bits);
  return static_cast<uint8_t>(sign | ((binade + f.bias) << f.mantissa_bits) |
                              static_cast<uint8_t>(mantissa));
}

float fp8_decode(uint8_t code, Fp8Format format) {
  const Layout f = layout(format);
  const bool negative = (code & 0x80) != 0;
  const int exponent_field = (code & 0x7F) >> f.mantissa_bits;
  const int mantissa = code & ((1 << f.mantissa_bits) - 1);
  const int all_ones = (1 << (7 - f.mantissa_bits)) - 1;
  if (format == Fp8Format::kE4M3 && exponent_field == all_ones && mantissa == (1 << 3) - 1)
    return NAN;
  if (format == Fp8Format::kE5M2 && exponent_field == all_ones)
    return mantissa == 0 ? (negative ? -INFINITY : INFINITY) : NAN;
  const double value =
      exponent_field == 0
          ? std::ldexp(double(mantissa), 1 - f.bias - f.mantissa_bits)
          : std::ldexp(double(mantissa + (1 << f.mantissa_bits)),
                       exponent_field - f.bias - f.mantissa_bits);
  return static_cast<float>(negative ? -value : value);
}

void fp8_cast_transpose(const float* in, int64_t rows, int64_t cols, float scale,
                        Fp8Format format, uint8_t* out, uint8_t* out_t, float* amax) {
  float largest = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float x = in[r * cols + c];
      if (std::isfinite(x)) largest = std::max(largest, std::fabs(x));
      const uint8_t code = fp8_encode(x * scale, format);
      if (out != nullptr) out[r * cols + c] = code;
      if (out_t != nullptr) out_t[c * rows + r] = code;
    }
  }
  if (amax != nullptr) *amax = largest;
}

Fp8Scale::Fp8Scale(Fp8Format format, int history, int margin, bool power_of_two,
                   float initial_scale)
    : format_(format), history_(static_cast<size_t>(history)), margin_(margin),
      power_of_two_(power_of_two), scale_(initial_scale) {
  GPT2_CHECK(history >= 1, "an amax history of ", history, " values");
  GPT2_CHECK(initial_scale > 0.0f && std::isfinite(initial_scale), "an FP8 scale of ",
             initial_scale);
}

bool Fp8Scale::saturates(float amax) const {
  return std::isfinite(amax) && amax * scale_ > fp8_max(format_);
}

void Fp8Scale::record(float amax) {
  amaxes_.push_back(amax);
  if (amaxes_.size() > history_) amaxes_.pop_front();
  float largest = 0.0f;
  for (const float a : amaxes_)
    if (std::isfinite(a)) largest = std::max(largest, a);
  if (!(largest > 0.0f)) return;  // nothing to scale by: keep the scale
  double next = double(fp8_max(format_)) / double(largest) / std::ldexp(1.0, margin_);
  if (power_of_two_) next = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(next))));
  if (!std::isfinite(static_cast<float>(next)) || static_cast<float>(next) == 0.0f) return;
  scale_ = static_cast<float>(next);
}

}  // namespace gpt2::cpu
