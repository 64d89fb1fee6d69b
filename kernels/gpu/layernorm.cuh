/**
 * @file layernorm.cuh
 * @brief LayerNorm over channels on the GPU, eps = 1e-5. CPU twin: kernels/cpu/layernorm.h.
 *
 * Forward:  mean = E[x], rstd = 1/sqrt(Var[x] + eps) (biased), out = (x - mean) rstd w + b
 *   out, inp (B,T,C) T_; weight, bias (C) T_; mean, rstd (B,T) fp32 (the CPU twin stores them
 *   as Real). mean/rstd may be nullptr when no backward will follow.
 * Backward: dinp += rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)), dnorm = dout w
 *           dweight += sum_bt dout norm;  dbias += sum_bt dout            (all ACCUMULATED, +=)
 *   scratch: layernorm_backward_scratch_floats(B,T,C) floats (per-chunk column sums).
 * T_ = float or __nv_bfloat16; all math in fp32 (mean and variance in two passes over the row),
 * one rounding to T_ per output. Any C >= 1.
 * Parallel scheme: one warp per (b,t) row with warp-shuffle reductions, in one of two forms.
 *   Packed, when C is a multiple of a 16-byte pack (4 fp32 / 8 bf16), C / pack <= 256 and
 *   every pointer is 16-byte aligned: lane l holds packs l, l+32, ... of the row in registers,
 *   so x and dout are read once and every access is 16 bytes; the backward's block takes a
 *   chunk of 64 rows (8 per warp) and also sums dout * norm and dout per channel over them
 *   (each lane its channels, in shared memory, then the 8 warps in order), so dweight/dbias
 *   cost no second pass.
 *   Scalar otherwise: lanes stride over C one element at a time, re-reading the row for each
 *   pass, and a thread per channel sums a chunk's rows for dweight/dbias. Either way the chunk
 *   sums land in scratch and one launch adds them to dweight and dbias in chunk order (a warp
 *   per channel). Fixed orders everywhere, no atomics: bitwise deterministic.
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace gpt2::gpu {

template <typename T_>
void layernorm_forward(T_* out, float* mean, float* rstd, const T_* inp, const T_* weight,
                       const T_* bias, int B, int T, int C, cudaStream_t stream);

/// The residual add and the LayerNorm that follows it, in one pass when the packed form
/// applies: residual_out = residual + addend (each sum rounded once to T_, as residual_forward),
/// then out, mean, rstd = layernorm_forward of residual_out. The same bits as residual_forward
/// then layernorm_forward (which it runs when the rows are not packable); each input is read
/// once. residual_out (B,T,C) must not overlap the other arguments.
template <typename T_>
void residual_layernorm_forward(T_* residual_out, T_* out, float* mean, float* rstd,
                                const T_* residual, const T_* addend, const T_* weight,
                                const T_* bias, int B, int T, int C, cudaStream_t stream);

/// Floats of scratch layernorm_backward needs.
int64_t layernorm_backward_scratch_floats(int B, int T, int C);

template <typename T_>
void layernorm_backward(T_* dinp, T_* dweight, T_* dbias, const T_* dout, const T_* inp,
                        const T_* weight, const float* mean, const float* rstd, int B, int T,
                        int C, float* scratch, cudaStream_t stream);

}  // namespace gpt2::gpu
