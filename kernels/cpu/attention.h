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
 * Decode (generation with a key/value cache): the keys and values of past positions live in
 *   per-layer caches k_cache, v_cache (B,NH,capacity,HS); attention_kv_cache_write() stores a
 *   (B,T,3C) qkv's keys and values at positions [pos, pos+T), and attention_decode_forward()
 *   attends one new query per sequence to the cached positions [0, length). Per query row it
 *   is the naive forward's computation (one shared row function), so a decoded row equals the
 *   naive forward's row for the same q, k, v bit for bit, and the flash row to rounding.
 *
 * Backward contract: dqkv is overwritten (=) in full (query, key and value parts).
 * Sums over keys (softmax denominators, P V, dP, D) accumulate in double for Real=float.
 * Indices into (B,NH,T,T) and into the caches are 64-bit.
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

/// Copies the keys and values of qkv (B,T,3C) into positions [pos, pos+T) of k_cache and
/// v_cache (B,NH,capacity,HS) (=); other positions are untouched. 0 <= pos, pos+T <= capacity.
template <typename Real>
void attention_kv_cache_write(Real* k_cache, Real* v_cache, const Real* qkv, int B, int T, int C,
                              int NH, int pos, int capacity);

/// out (B,C) = causal attention of the query of qkv (B,3C) (one position per sequence; its key
/// and value parts are not read) over the cached keys and values at positions [0, length) of
/// k_cache, v_cache (B,NH,capacity,HS). The new position's own key and value must already be
/// in the cache (attention_kv_cache_write first). 1 <= length <= capacity. Overwrites out (=).
template <typename Real>
void attention_decode_forward(Real* out, const Real* qkv, const Real* k_cache,
                              const Real* v_cache, int B, int C, int NH, int length,
                              int capacity);

/// Context parallelism: the attention of Tq query rows at global positions q_pos[0..Tq) (the
/// same for every sequence; each in [0, Tk)) over the keys and values of all Tk positions of
/// the sequence, causal by position (a query sees the keys at positions <= its own).
/// q: (B,Tq) rows of C query channels, `q_stride` apart (3C: the query part of a qkv row);
/// kv (B,Tk,2C): each position's C key channels, then its C value channels.
/// Forward: out (B,Tq,C) (=) and lse (B,NH,Tq) (=), as the flash forward defines them.
/// Backward: dq rows (`dq_stride` apart) (=), and dkv (B,Tk,2C) += the keys' and values'
/// gradients from these queries (every rank's queries add into the same positions).
/// With q_pos = 0..T-1 and kv the keys and values of the same qkv, this is the causal
/// attention above, to rounding. Row by row, sums in double for Real = float; parallel over
/// (b, h), each owned by one thread.
template <typename Real>
void attention_positions_forward(Real* out, Real* lse, const Real* q, int q_stride,
                                 const Real* kv, const int* q_pos, int B, int Tq, int Tk, int C,
                                 int NH);

template <typename Real>
void attention_positions_backward(Real* dq, int dq_stride, Real* dkv, const Real* dout,
                                  const Real* q, int q_stride, const Real* kv, const Real* out,
                                  const Real* lse, const int* q_pos, int B, int Tq, int Tk,
                                  int C, int NH);

}  // namespace gpt2::cpu
