/**
 * @file crossentropy.cuh
 * @brief Softmax + cross-entropy over the real vocabulary of padded logits, on the GPU.
 *
 * CPU twin: kernels/cpu/crossentropy.h, with one difference: the GPU never materializes the
 * probabilities (B*T*Vp of them is the largest activation of the model). Forward returns only
 * the losses, and backward recomputes the softmax from the logits; so neither takes `probs`.
 *   logits (B,T,Vp) T_, columns [V, Vp) are padding and excluded; targets (B,T) in [0, V).
 * Forward:  losses[bt] = logsumexp(logits[bt, :V]) - logits[bt, target]     (fp32, B*T)
 * Backward: dlogits[bt, v] = (softmax(logits[bt, :V])[v] - [v == target]) * dlosses[bt] for
 *           v < V, 0 for padding columns (overwritten, =). dlosses fp32 (B,T).
 *   dlogits may alias logits (in place): each row is fully read (max, sum) before any write.
 * Forward + backward fused (training's classifier, one launch): losses as the forward, and the
 *   logits overwritten in place by dlogits as the backward with every dlosses[bt] = dloss (one
 *   scalar, e.g. loss_scale / (B*T)); the same bits as crossentropy_forward followed by
 *   crossentropy_backward. When a row fits a block's shared memory (GPT-2's bf16 rows: 100.6
 *   KB) and rows are packed, each row is read from memory once: persistent blocks, two an SM,
 *   copy a row into shared memory and compute it from there; otherwise one block a row reads it
 *   three times. CPU twin: cpu::crossentropy_forward_backward. Takes
 *   (B, T) like the others; a chunk of rows is (1, rows).
 * A target outside [0, V) yields a NaN loss / a NaN row of dlogits (visible, not a crash).
 * T_ = float or __nv_bfloat16; in fp32, as the CPU twin does in double: the row's max (NaN
 * logits passed over), then the sum of exp(logit - max) (a NaN logit makes it NaN, so the loss
 * too), then the gradient; with 16-byte accesses when Vp and the pointers allow.
 * Parallel scheme: a block of 1024 threads per row, threads striding over the vocabulary,
 *   block reductions in a fixed order: deterministic. Row offsets are 64-bit (B*T*Vp).
 */
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/gpu/fp8_cast.cuh"

namespace gpt2::gpu {

template <typename T_>
void crossentropy_forward(float* losses, const T_* logits, const int* targets, int B, int T,
                          int V, int Vp, cudaStream_t stream);

template <typename T_>
void crossentropy_backward(T_* dlogits, const float* dlosses, const T_* logits,
                           const int* targets, int B, int T, int V, int Vp, cudaStream_t stream);

/// losses (B,T) fp32 (=) and logits (B,T,Vp) overwritten by dlogits (=); dloss one scalar.
/// With codes.rows set (--precision fp8's classifier): also dlogits' E5M2 codes, (B*T, Vp) rows
/// only, of each dlogit as rounded to T_ times *codes.scale (saturating), and *codes.amax raised
/// to the largest finite |dlogit|: the bits of fp8_cast_transpose of the dlogits written. Vp a
/// multiple of the 16-byte pack, codes.rows 8-byte aligned. codes_only (with codes.rows): the
/// codes and the losses alone, the logits left as they were (no dlogits written; the codes are
/// still those of the dlogits as rounded to T_).
template <typename T_>
void crossentropy_forward_backward(float* losses, T_* logits, const int* targets, float dloss,
                                   int B, int T, int V, int Vp, cudaStream_t stream,
                                   const Fp8Destination& codes = {}, bool codes_only = false);

}  // namespace gpt2::gpu
