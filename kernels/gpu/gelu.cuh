/**
 * @file gelu.cuh
 * @brief GELU, tanh approximation, on the GPU. CPU twin: kernels/cpu/gelu.h (same math).
 *
 * Forward:  out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * Backward: dinp = gelu'(x) * dout        (overwritten, =)
 *   out, inp, dinp, dout: N elements of T_ = float or __nv_bfloat16; math in fp32 (tanhf, not
 *   the fast intrinsic), one rounding to T_ per output. out may alias inp, dinp may alias dout
 *   (each element is read and written by the same thread).
 * Parallel scheme: one thread per 16-byte pack (4 floats / 8 bf16) when every pointer is
 *   16-byte aligned, the ragged tail and unaligned pointers by one thread per element.
 *   Deterministic (elementwise). N may be 0.
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace gpt2::gpu {

template <typename T_>
void gelu_forward(T_* out, const T_* inp, int64_t N, cudaStream_t stream);

template <typename T_>
void gelu_backward(T_* dinp, const T_* inp, const T_* dout, int64_t N, cudaStream_t stream);

}  // namespace gpt2::gpu
