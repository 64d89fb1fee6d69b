/**
 * @file exp2_poly.h
 * @brief 2^x for the softmax's arguments (x <= 0) on the FMA and integer pipes, without the
 *        MUFU exp2 unit: for issue 23's Hopper attention forward, where at head size 64 the
 *        MUFU unit is as busy as the tensor cores, so a share of the exponentials computed
 *        here runs beside it. Host and device code, the same float operations on both
 *        (additions, fused multiply-adds, integer adds), so the host's values are the GPU's
 *        bit for bit and the CPU tests bound the device's error.
 *
 * exp2_poly<kDegree>(x): x = n + f with n = round(x) (to nearest, by the 1.5 * 2^23 shift) and
 * f in [-1/2, 1/2]; 2^f by a polynomial of degree kDegree (3 or 4; Horner, fused multiply-adds),
 * the relative-error minimax on [-1/2, 1/2] (Remez), rounded to float; then n added to the
 * exponent bits. Relative error against 2^x, for -125 <= x <= 0 (tests/kernels/
 * exp2_poly_test.cpp, every 61st float of the range and the neighbourhoods of the extrema):
 *   degree 3: at most kExp2PolyBound<3> = 8e-5   (minimax 7.48e-5, plus float rounding)
 *   degree 4: at most kExp2PolyBound<4> = 3e-6   (minimax 2.59e-6)
 * Both far below bf16's rounding of the probabilities (2^-9 relative), which is what the
 * attention's P V product sees. Below -125 (where the exponent bits would leave the normal
 * range), and at -inf (masked scores), the result is exactly 0. x > 0 is outside the contract
 * (the softmax subtracts the row maximum first).
 */
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define GPT2_EXP2_FN __host__ __device__ __forceinline__
#else
#include <cmath>
#define GPT2_EXP2_FN inline
#endif

namespace gpt2 {

template <int kDegree>
constexpr float kExp2PolyBound = kDegree == 3 ? 8e-5f : 3e-6f;

namespace exp2_poly_detail {

GPT2_EXP2_FN float fused_multiply_add(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// The bits of x as a To of the same size (float <-> uint32_t).
template <typename To, typename From>
GPT2_EXP2_FN To same_bits(From x) {
  static_assert(sizeof(To) == sizeof(From), "same_bits keeps the size");
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<From, float>) {
    return __float_as_uint(x);
  } else {
    return __uint_as_float(x);
  }
#else
  To y;
  std::memcpy(&y, &x, sizeof y);
  return y;
#endif
}

/// 2^f on [-1/2, 1/2] by Horner's rule, the minimax coefficients of degree kDegree.
template <int kDegree>
GPT2_EXP2_FN float exp2_fraction(float f) {
  static_assert(kDegree == 3 || kDegree == 4, "exp2_poly has degrees 3 and 4");
  if constexpr (kDegree == 3) {
    float p = 0.0551716690926f;
    p = fused_multiply_add(p, f, 0.242611122224f);
    p = fused_multiply_add(p, f, 0.693260985454f);
    return fused_multiply_add(p, f, 0.999928073535f);
  } else {
    float p = 0.00957010201463f;
    p = fused_multiply_add(p, f, 0.0559178603063f);
    p = fused_multiply_add(p, f, 0.24024744825f);
    p = fused_multiply_add(p, f, 0.693121814743f);
    return fused_multiply_add(p, f, 0.999999261447f);
  }
}

}  // namespace exp2_poly_detail

template <int kDegree>
GPT2_EXP2_FN float exp2_poly(float x) {
  using namespace exp2_poly_detail;
  constexpr float kLowest = -125.0f;          // 2^n stays a normal float's exponent
  constexpr float kRoundShift = 12582912.0f;  // 1.5 * 2^23: x + it keeps round(x) in its low bits
  const float clamped = x > kLowest ? x : kLowest;  // -inf and NaN-free scores clamp here
  const float shifted = clamped + kRoundShift;
  const float whole = shifted - kRoundShift;  // round(clamped), exactly
  const float f = clamped - whole;            // in [-1/2, 1/2], exactly
  const float p = exp2_fraction<kDegree>(f);
  // n = bits(shifted) - bits(kRoundShift); p's exponent field + n, in unsigned arithmetic.
  const uint32_t n_shifted =
      (same_bits<uint32_t>(shifted) - same_bits<uint32_t>(kRoundShift)) << 23;
  const float result = same_bits<float>(same_bits<uint32_t>(p) + n_shifted);
  return x < kLowest ? 0.0f : result;
}

}  // namespace gpt2

#undef GPT2_EXP2_FN
