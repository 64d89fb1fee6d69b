/**
 * @file encoder.cuh
 * @brief Token + position embedding on the GPU. CPU twin: kernels/cpu/encoder.h (same math).
 *
 * Forward:  out[b,t,:] = wte[inp[b,t], :] + wpe[t, :]          (overwritten, =)
 *   out (B,T,C), inp (B,T) device token ids in [0, Vp), wte (Vp,C), wpe (maxT,C), T <= maxT.
 *   One thread per output element; the add in fp32, rounded once to T_.
 * Backward: dwte[inp[b,t], :] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]   (accumulated, +=)
 *   inp (B,T) device token ids in [0, Vp) (an id outside is never written through, but leaves
 *   dwte undefined), dwte (Vp,C), dwpe (maxT,C). Deterministic (bitwise, run to run) without
 *   atomics, all on the GPU: a stable CUB radix sort orders the B*T positions by token (over
 *   the bits of Vp-1), so each token's positions are a run in ascending order; the first
 *   position of each run owns it and, per channel, sums dout over the run in that order in fp32
 *   and adds the sum to dwte once. dwpe: one thread per (t, channel) sums over b = 0..B-1 in
 *   order. Each gradient element has one writer, so there are no races.
 *   Everything is enqueued on `stream`: no host synchronization, no allocation, and a grid that
 *   does not depend on the ids, so the call can be captured in a CUDA graph. Scratch: `scratch`
 *   holds encoder_backward_scratch_bytes(B,T,Vp) bytes, 256-byte aligned (as cudaMalloc gives),
 *   and is not read before it is written; the call checks that CUB's own requirement fits it.
 * T_ = float or __nv_bfloat16; offsets into (B,T,C) and (Vp,C) are 64-bit.
 */
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace gpt2::gpu {

template <typename T_>
void encoder_forward(T_* out, const int* inp, const T_* wte, const T_* wpe, int B, int T, int C,
                     cudaStream_t stream);

/// Bytes of `scratch` encoder_backward needs: the radix sort's double-buffered keys (token ids)
/// and values (positions), 4 x B*T int32, plus a bound on CUB's temporary storage of
/// 64 KiB + B*T bytes (that bound holds for every Vp); each part rounded up to 256 bytes. Host
/// arithmetic only (no device call), so memory plans can be built without a GPU. Enough for any
/// call with a smaller B*T too.
size_t encoder_backward_scratch_bytes(int B, int T, int Vp);

template <typename T_>
void encoder_backward(T_* dwte, T_* dwpe, const T_* dout, const int* inp, int B, int T, int C,
                      int Vp, void* scratch, cudaStream_t stream);

}  // namespace gpt2::gpu
