/**
 * @file attention_decode.cuh
 * @brief Attention of one new query per sequence over a key/value cache (generation) on the
 *        GPU. CPU twins: cpu::attention_kv_cache_write and cpu::attention_decode_forward
 *        (kernels/cpu/attention.h): same names, argument order, layouts and contracts.
 *
 * Caches k_cache, v_cache (B,NH,capacity,HS) of one layer, HS = C/NH: position p of head h of
 * sequence b is row (b*NH + h)*capacity + p. Storage T_ = float or __nv_bfloat16.
 * attention_kv_cache_write: the keys and values of qkv (B,T,3C) (channels [C,2C) and [2C,3C) of
 *   each row) into cache positions [pos, pos+T) (=, an exact copy); other positions untouched.
 * attention_decode_forward: out (B,C) = softmax(scale q K^T) V over the cached positions
 *   [0, length), q the query of qkv (B,3C) (channels [0,C) of each row, one position per
 *   sequence; its key and value parts are not read: write them into the cache first),
 *   scale = 1/sqrt(HS). Overwrites out (=). fp32 math (scores, exponentials, sums), one rounding
 *   to T_ per output.
 * Parallel scheme, split-K ("flash-decoding"): the positions are cut into chunks of
 *   kAttentionDecodeChunk; a block per (chunk, head of a sequence) computes its chunk's scores
 *   (a thread per position, q staged in shared memory as fp32), their max m, l = sum exp(s - m)
 *   and the unnormalized o = sum exp(s - m) v into fp32 partials; a combine block per head
 *   merges the chunks in chunk order: M = max m_c, out = sum_c e^(m_c-M) o_c / sum_c e^(m_c-M)
 *   l_c. With a single chunk (length <= kAttentionDecodeChunk) the first kernel writes out
 *   itself. Deterministic: fixed reduction orders, no atomics.
 * Keys and values are read by 16-byte packs when HS is a multiple of 16/sizeof(T_) and the
 * caches are 16-byte aligned, element by element otherwise: any HS works.
 * Preconditions (checked): 1 <= length <= capacity; B*NH <= 65535; scratch holds
 * attention_decode_scratch_floats(B, C, NH, capacity) floats (enough for any length up to
 * capacity). Offsets are 64-bit.
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace gpt2::gpu {

/// Cache positions one split-K block attends to.
constexpr int kAttentionDecodeChunk = 128;

/// Chunks (split-K blocks per head) of a decode over `length` positions.
int attention_decode_num_chunks(int length);

/// Floats of scratch attention_decode_forward needs for any length <= capacity: per (b, h,
/// chunk) a max, a sum and HS partial outputs.
int64_t attention_decode_scratch_floats(int B, int C, int NH, int capacity);

template <typename T_>
void attention_kv_cache_write(T_* k_cache, T_* v_cache, const T_* qkv, int B, int T, int C,
                              int NH, int pos, int capacity, cudaStream_t stream);

template <typename T_>
void attention_decode_forward(T_* out, const T_* qkv, const T_* k_cache, const T_* v_cache, int B,
                              int C, int NH, int length, int capacity, float* scratch,
                              cudaStream_t stream);

}  // namespace gpt2::gpu
