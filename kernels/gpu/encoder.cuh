/**
 * @file encoder.cuh
 * @brief Token + position embedding on the GPU. CPU twin: kernels/cpu/encoder.h (same math).
 *
 * Forward:  out[b,t,:] = wte[inp[b,t], :] + wpe[t, :]          (overwritten, =)
 *   out (B,T,C), inp (B,T) device token ids in [0, Vp), wte (Vp,C), wpe (maxT,C), T <= maxT.
 *   One thread per output element; the add in fp32, rounded once to T_.
 * Backward: dwte[inp[b,t], :] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]   (accumulated, +=)
 *   Deterministic without atomics. The ids are known on the host when the model calls this, so
 *   the caller also passes them there (inp_host, the same B*T ids as inp). The launcher sorts
 *   the positions by token on the host (stable: position order within a token), uploads the
 *   buckets into bucket_scratch (encoder_backward_scratch_ints(B,T) ints, one cudaMemcpyAsync
 *   from pageable memory: it returns once the data is staged, so nothing outlives the call),
 *   and then one thread per (token bucket, channel) sums its positions' dout in position order
 *   in fp32 and adds the sum to dwte once; one thread per (t, channel) sums over b = 0..B-1 in
 *   order and adds to dwpe. Each gradient element has one writer, so there are no races.
 *   The host work makes the call synchronous with respect to the host for the sort (O(BT log BT)).
 * T_ = float or __nv_bfloat16; offsets into (B,T,C) and (Vp,C) are 64-bit.
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace gpt2::gpu {

template <typename T_>
void encoder_forward(T_* out, const int* inp, const T_* wte, const T_* wpe, int B, int T, int C,
                     cudaStream_t stream);

/// Ints of bucket_scratch encoder_backward needs: B*T positions + (B*T + 1) bucket starts.
int64_t encoder_backward_scratch_ints(int B, int T);

template <typename T_>
void encoder_backward(T_* dwte, T_* dwpe, const T_* dout, const int* inp, int B, int T, int C,
                      const int* inp_host, int* bucket_scratch, cudaStream_t stream);

}  // namespace gpt2::gpu
