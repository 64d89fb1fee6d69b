/**
 * @file gelu_device.cuh
 * @brief GELU (tanh approximation) and its derivative for one fp32 value, on the device: the
 *        math of gelu.cu, shared with the kernels that fuse a GELU backward (fp8_cast.cu).
 *        Device code: include from .cu files only.
 *
 * gelu(x)  = 0.5 x (1 + t),  t = tanh(sqrt(2/pi) (x + 0.044715 x^3))
 * gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2);
 *   1 - t^2 is sech^2 without coshf's overflow. tanhf, not the fast intrinsic.
 */
#pragma once

namespace gpt2::gpu {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  const float t = tanhf(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5f * x * (1.0f + t);
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float t = tanhf(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float sech2 = 1.0f - t * t;
  return 0.5f * (1.0f + t) +
         0.5f * x * sech2 * kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
}

}  // namespace gpt2::gpu
