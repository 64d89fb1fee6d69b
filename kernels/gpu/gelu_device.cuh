/**
 * @file gelu_device.cuh
 * @brief GELU (tanh approximation) and its derivative for one fp32 value, on the device: the
 *        math of gelu.cu, shared with the kernels that fuse a GELU backward (fp8_cast.cu).
 *        Device code: include from .cu files only.
 *
 * gelu(x)  = 0.5 x (1 + t),  t = tanh(sqrt(2/pi) (x + 0.044715 x^3))
 * gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2);
 *   1 - t^2 is sech^2 without coshf's overflow.
 * gelu's t is tanhf. gelu_grad's t is tanh_by_exp2: 1 - 2 / (2^(2 u log2 e) + 1), with
 * ex2.approx (relative error about 2^-22) and a fast division: an absolute error of a few
 * ulps of 1 in t, like tanhf's, at a fraction of its cost (tanhf's range branches and
 * polynomial were about 40 instructions an element, and bound the FP8 gradient cast that
 * folds in the GELU backward; issue 22). gelu_backward and that cast share it, so they agree
 * bit for bit; cuBLASLt's DGELU epilogue (the bf16 path) has its own.
 */
#pragma once

namespace gpt2::gpu {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  const float t = tanhf(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5f * x * (1.0f + t);
}

/// tanh(u) = 1 - 2 / (e^(2u) + 1); e^(2u) overflowing to inf gives 1, underflowing to 0 gives -1.
__device__ __forceinline__ float tanh_by_exp2(float u) {
  constexpr float kTwoLog2e = 2.8853900817779268f;  // 2 log2(e)
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(e) : "f"(kTwoLog2e * u));
  return 1.0f - __fdividef(2.0f, e + 1.0f);
}

/// gelu(x) as x sigmoid(2u) = x / (1 + 2^(-2u log2 e)), u = sqrt(2/pi) (x + 0.044715 x^3):
/// the tanh form's value without its cancellation at large negative x, from ex2.approx and a
/// fast division (a few ulps relative; 2^(-2u log2 e) overflowing gives x / inf = 0). For
/// outputs rounded further (the FP8 cast that folds in fc's GELU); gelu() stays tanhf's.
__device__ __forceinline__ float gelu_by_exp2(float x) {
  constexpr float kMinusTwoLog2e = -2.8853900817779268f;  // -2 log2(e)
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(e) : "f"(kMinusTwoLog2e * u));
  return __fdividef(x, 1.0f + e);
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float t = tanh_by_exp2(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float sech2 = 1.0f - t * t;
  return 0.5f * (1.0f + t) +
         0.5f * x * sech2 * kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
}

}  // namespace gpt2::gpu
