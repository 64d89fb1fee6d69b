/**
 * @file residual.cuh
 * @brief Residual add on the GPU. CPU twin: kernels/cpu/residual.h (same math).
 *
 * Forward:  out = inp1 + inp2                       (overwritten, =)
 * Backward: dinp1 += dout; dinp2 += dout          (accumulated, +=; see the CPU header for why)
 *   N elements of T_ = float or __nv_bfloat16; the add is done in fp32 and rounded once to T_.
 *   out may alias inp1 or inp2. dinp1 and dinp2 must not alias each other.
 * Parallel scheme: one thread per 16-byte pack when every pointer is 16-byte aligned, the
 *   ragged tail and unaligned pointers by one thread per element. Deterministic. N may be 0.
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace gpt2::gpu {

template <typename T_>
void residual_forward(T_* out, const T_* inp1, const T_* inp2, int64_t N, cudaStream_t stream);

template <typename T_>
void residual_backward(T_* dinp1, T_* dinp2, const T_* dout, int64_t N, cudaStream_t stream);

}  // namespace gpt2::gpu
