/**
 * @file attention.cuh
 * @brief Causal multi-head attention on the GPU: naive (cuBLAS + materialized P) and flash.
 *
 * Same math, names and argument order as kernels/cpu/attention.h (read it for the layouts):
 * qkv (B,T,3C), out (B,T,C), HS = C/NH, scale = 1/sqrt(HS), causal. T is any value >= 1.
 * Storage type T_ = float or __nv_bfloat16; accumulation always fp32; lse always fp32.
 * dqkv is overwritten (=) in full.
 *
 * Naive: Q, K, V permuted to (B,NH,T,HS); S = scale Q K^T by a strided-batched cuBLAS GEMM
 *   written into `probs` (B,NH,T,T); one fused causal-mask + softmax kernel turns it into P in
 *   place; O = P V by a second GEMM. Backward from the stored P: dV = P^T dO, dP = dO V^T (into
 *   `dprobs_scratch`, also (B,NH,T,T)), dS = P (dP - rowsum(P dP)) in place, dQ = scale dS K,
 *   dK = scale dS^T Q. P and the scratch are real T x T device buffers; all indexing into them
 *   is 64-bit.
 *   Scratch: forward needs 4*B*T*C elements, backward 7*B*T*C (attention_naive_scratch_elems).
 *
 * Flash (FlashAttention-2 scheme), no T x T buffer anywhere:
 *   bf16: tensor-core kernels (mma.sync m16n8k16, fp32 accumulation). Forward: a thread block
 *     per (64 queries, b, h); K/V tiles of 64 keys double-buffered in shared memory by cp.async;
 *     scores and the online softmax in registers; key blocks above the diagonal skipped; O and
 *     lse written. Backward: D = rowsum(dO O); a thread block per (64 keys, b, h) loops over the
 *     query blocks at or below the diagonal, recomputes P from lse, accumulates dK and dV in
 *     registers and adds dQ into an fp32 buffer with atomics (so dQ's last bits depend on the
 *     order of those additions: not bitwise run-to-run deterministic); a last kernel writes dQ.
 *   fp32: exact SIMT kernels with the same tiling idea (groups of threads per query/key row);
 *     deterministic (dQ by its own kernel, no atomics). Slow; the --precision fp32 fallback.
 *   Head size 64 or 128. Scratch (backward): attention_flash_scratch_floats(B,T,C,NH) floats.
 */
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace gpt2::gpu {

class Context;

template <typename T_>
void attention_naive_forward(T_* out, T_* probs, const T_* qkv, int B, int T, int C, int NH,
                             T_* scratch, const Context& ctx);

template <typename T_>
void attention_naive_backward(T_* dqkv, const T_* dout, const T_* qkv, const T_* probs, int B,
                              int T, int C, int NH, T_* scratch, T_* dprobs_scratch,
                              const Context& ctx);

/// Elements of scratch the naive forward (backward=false) or backward needs.
size_t attention_naive_scratch_elems(int B, int T, int C, bool backward);

template <typename T_>
void attention_flash_forward(T_* out, float* lse, const T_* qkv, int B, int T, int C, int NH,
                             cudaStream_t stream);

template <typename T_>
void attention_flash_backward(T_* dqkv, const T_* dout, const T_* qkv, const T_* out,
                              const float* lse, int B, int T, int C, int NH, float* scratch,
                              cudaStream_t stream);

/// Floats of scratch attention_flash_backward needs: D (B,NH,T) and the fp32 dQ (B,T,C).
size_t attention_flash_scratch_floats(int B, int T, int C, int NH);

}  // namespace gpt2::gpu
