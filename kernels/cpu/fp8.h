/**
 * @file fp8.h
 * @brief FP8 on the host: the two OCP formats Hopper's tensor cores take, conversion to and from
 *        them as the GPU converts, the cast-transpose-amax pass FP8 GEMMs need, and per-tensor
 *        scales from an amax history. The CPU twins of the FP8 path (issue 22).
 *
 * Formats. E4M3 ("fn": 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinity, NaN only
 * S.1111.111; largest finite 448, smallest subnormal 2^-9) for values (activations, weights);
 * E5M2 (bias 15, 2 mantissa bits; IEEE-like infinities and NaNs; largest finite 57344, smallest
 * subnormal 2^-16) for gradients. fp8_encode rounds to nearest, ties to even, and saturates as
 * CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) does: a finite value or an infinity
 * beyond the largest finite gives the largest finite of its sign, a value at most half the
 * smallest subnormal gives a zero of its sign, NaN gives 0x7F. fp8_decode is exact.
 *
 * Cast-transpose-amax (fp8_cast_transpose): from a (rows, cols) row-major tensor, the codes of
 * x * scale in both (rows, cols) and (cols, rows) order (Hopper's FP8 GEMMs read both operands
 * K-major, so a GEMM's other use of the tensor needs the transpose) and amax = max |x| over the
 * finite values, in one pass.
 *
 * Scales (Fp8Scale): Transformer Engine's delayed scaling: each use records the tensor's amax in
 * a history of the last `history` values; the scale for the next use is
 * fp8_max / max(history) / 2^margin, optionally rounded down to a power of two (then x * scale
 * and its inverse are exact). A history with no finite positive amax, or a scale that would not
 * be finite (an amax near zero), keeps the previous scale. A use saturated when its amax times
 * the scale it was cast with exceeds the largest finite value (saturates()).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

namespace gpt2::cpu {

enum class Fp8Format { kE4M3, kE5M2 };

const char* to_string(Fp8Format format);  // "e4m3" | "e5m2"

/// Largest finite value: 448 (E4M3) or 57344 (E5M2).
float fp8_max(Fp8Format format);

uint8_t fp8_encode(float x, Fp8Format format);
float fp8_decode(uint8_t code, Fp8Format format);

/// out (rows, cols) and out_t (cols, rows) = fp8_encode(in * scale) (either may be null), and
/// *amax (unless null) = the largest |in| over the finite elements (0 when none).
void fp8_cast_transpose(const float* in, int64_t rows, int64_t cols, float scale,
                        Fp8Format format, uint8_t* out, uint8_t* out_t, float* amax);

/// A tensor's delayed scale (see the file comment).
class Fp8Scale {
 public:
  Fp8Scale(Fp8Format format, int history, int margin = 0, bool power_of_two = true,
           float initial_scale = 1.0f);

  /// The scale the next cast multiplies by (initial_scale until an amax is recorded).
  float scale() const { return scale_; }
  /// What a decode multiplies by: 1 / scale().
  float inverse() const { return 1.0f / scale_; }
  /// Records one use's amax and computes the next scale.
  void record(float amax);
  /// Whether a cast at scale() of values whose largest finite magnitude is amax clamped some of
  /// them to the format's largest finite value: amax * scale() > fp8_max (float arithmetic; an
  /// amax that is not finite says nothing). A delayed scale lags a growing tensor; this is how
  /// often it lagged too far.
  bool saturates(float amax) const;

 private:
  Fp8Format format_;
  size_t history_;
  int margin_;
  bool power_of_two_;
  std::deque<float> amaxes_;
  float scale_;
};

}  // namespace gpt2::cpu
