/**
 * @file fp8_device.cuh
 * @brief Device pieces the kernels that write FP8 codes share (fp8_cast.cu, layernorm_fp8.cu;
 *        device code: include from .cu files only).
 *
 * - fp8_codes<kFormat>(x, scale, codes): the codes of n floats times scale, two at a time, as
 *   __nv_cvt_float_to_fp8(x * scale, __NV_SATFINITE, kFormat) converts each (round to nearest
 *   even, saturating to the largest finite; the paired conversion rounds the same).
 * - fp8_code_words<kFormat>(x, scale): the same for 8 floats, as two words of codes.
 * - raise_block_amax(largest, amax, scratch): *amax = max(*amax, the block's largest), one
 *   atomicMax on the float's bits (non-negative floats order as their bit patterns do), skipped
 *   when the stored value is already as large. Every thread calls it; it synchronizes.
 */
#pragma once

#include <cstdint>

#include <cuda_fp8.h>

#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {

template <__nv_fp8_interpretation_t kFormat, int kCount>
__device__ __forceinline__ void fp8_codes(const float (&x)[kCount], float scale,
                                          uint8_t (&codes)[kCount]) {
  static_assert(kCount % 2 == 0, "codes are converted in pairs");
#pragma unroll
  for (int j = 0; j < kCount; j += 2) {
    const __nv_fp8x2_storage_t pair =
        __nv_cvt_float2_to_fp8x2(make_float2(x[j] * scale, x[j + 1] * scale), __NV_SATFINITE,
                                 kFormat);
    codes[j] = static_cast<uint8_t>(pair & 0xff);
    codes[j + 1] = static_cast<uint8_t>(pair >> 8);
  }
}

/// fp8_codes of 8 floats as two words (codes 0-3, 4-7, first code in the low byte): the pairs'
/// conversions packed by byte permutes, with no byte array (which the compiler may keep in
/// local memory).
template <__nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ uint2 fp8_code_words(const float (&x)[8], float scale) {
  uint32_t pairs[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    pairs[j] = __nv_cvt_float2_to_fp8x2(make_float2(x[2 * j] * scale, x[2 * j + 1] * scale),
                                        __NV_SATFINITE, kFormat);
  return make_uint2(__byte_perm(pairs[0], pairs[1], 0x5410),
                    __byte_perm(pairs[2], pairs[3], 0x5410));
}

/// `scratch`: 32 floats of shared memory.
__device__ __forceinline__ void raise_block_amax(float largest, float* amax, float* scratch) {
  largest = block_reduce_max(largest, scratch);
  if (threadIdx.x == 0 && largest > 0.0f &&
      largest > *reinterpret_cast<volatile float*>(amax))
    atomicMax(reinterpret_cast<int*>(amax), __float_as_int(largest));
}

}  // namespace gpt2::gpu
