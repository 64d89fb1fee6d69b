/**
 * @file attention.h
 * @brief Causal multi-head self-attention, naive and flash forms (CPU reference).
 *
 * qkv (B,T,3C): for position (b,t) the C query channels, then C key, then C value channels;
 * head h owns channels [h*HS, (h+1)*HS) of each, HS = C/NH. out (B,T,C), heads concatenated.
 *   S = scale * Q K^T (scale = 1/sqrt(HS)), masked where key > query, P = softmax_row(S), O = P V.
 *
 * Naive: materializes P (B,NH,T,T) (masked entries written as 0) and backprops from it.
 * Flash: tiles queries (block_q rows) against keys/values (block_k rows) with the online softmax
 *   (running max m, running sum l, rescaled accumulator), skips key blocks above the diagonal,
 *   and stores only O and lse = m + log(l) (B,NH,T). Backward computes D = rowsum(dO * O) and
 *   recomputes P = exp(S - lse) block by block: dV += P^T dO, dP = dO V^T, dS = P * (dP - D),
 *   dQ += scale * dS K, dK += scale * dS^T Q. Nothing of size T x T is stored.
 *   This is the algorithm the CUDA flash kernels implement; block sizes need not divide T.
 *
 * Backward contract: dqkv is overwritten (=) in full (query, key and value parts).
 * Sums over keys (softmax denominators, P V, dP, D) accumulate in double for Real=float.
 * Indices into (B,NH,T,T) are 64-bit.
 */
#pragma once

namespace gpt2::cpu {

struct FlashBlocks {
  int block_q = 64;  // query rows per tile
  int block_k = 64;  // key/value rows per tile
};

template <typename Real>
void attention_naive_forward(Real* out, Real* probs, const Real* qkv, int B, int T, int C, int NH);

template <typename Real>
void attention_naive_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* probs,
                              int B, int T, int C, int NH);

template <typename Real>
void attention_flash_forward(Real* out, Real* lse, const Real* qkv, int B, int T, int C, int NH,
                             FlashBlocks blocks = {});

template <typename Real>
void attention_flash_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* out,
                              const Real* lse, int B, int T, int C, int NH,
                              FlashBlocks blocks = {});

}  // namespace gpt2::cpu
