/**
 * @file attention_decode.cu
 * @brief Key/value cache write and split-K decode attention; contract in attention_decode.cuh.
 *
 * Split-K block (kThreads = kAttentionDecodeChunk threads, one per position of its chunk):
 *   1. q (HS) -> shared memory as fp32;
 *   2. thread j: s_j = scale * (q . k_j) in fp32 over its key row (kVec elements per load);
 *   3. m = block max of s, w_j = exp(s_j - m) into shared memory, l = block sum of w;
 *   4. o = sum_j w_j v_j: thread (d, r) owns value pack d (kVec channels) and the positions
 *      j = r, r+R, ... (R = kThreads / packs-per-pass), so a row's packs are read by adjacent
 *      threads; the R partial rows are summed in r order through shared memory. Heads with more
 *      than kThreads packs take several passes.
 * Partials in scratch for a call with `chunks` chunks: max (B*NH, chunks), then sum (B*NH,
 * chunks), then o (B*NH, chunks, HS), all fp32.
 */
#include "kernels/gpu/attention_decode.cuh"

#include <cmath>

#include "base/error.h"
#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kThreads = kAttentionDecodeChunk;  // one thread per position of a chunk
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block reductions need whole warps");
constexpr int kCacheWriteThreads = 256;
constexpr int kCombineThreads = 128;
// Bytes of the fp32 q in dynamic shared memory (HS <= 8192), so that with the static arrays
// (under 5 KB) a block stays within the 48 KB available without opting in.
constexpr int kMaxQueryShared = 32 * 1024;

// ---------------------------------------------------------------------------------------------
// Device helpers

/// kVec consecutive T_ as floats: one 16-byte load (kVec = 16/sizeof(T_); ptr 16-byte aligned)
/// or one element (kVec = 1).
template <int kVec, typename T_>
__device__ __forceinline__ void load_floats(const T_* ptr, float (&out)[kVec]) {
  if constexpr (kVec == 1) {
    out[0] = to_float(*ptr);
  } else {
    static_assert(kVec == Pack16<T_>::kSize, "vector loads are 16 bytes");
    const Pack16<T_> pack = load_pack16(ptr);
#pragma unroll
    for (int e = 0; e < kVec; ++e) out[e] = to_float(pack.values[e]);
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels

/// One thread per key/value element of qkv (B,T,3C): i = (b*T + t)*C + c.
template <typename T_>
__global__ void kv_cache_write_kernel(T_* k_cache, T_* v_cache, const T_* qkv, int64_t n, int T,
                                      int C, int NH, int HS, int pos, int capacity) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t bt = i / C;
  const int c = static_cast<int>(i % C);
  const int64_t b = bt / T;
  const int t = static_cast<int>(bt % T);
  const int h = c / HS;
  const int d = c % HS;
  const int64_t src = bt * 3 * C + C + c;  // the key channel; the value is C further
  const int64_t dst = ((b * NH + h) * capacity + pos + t) * HS + d;
  k_cache[dst] = qkv[src];
  v_cache[dst] = qkv[src + C];
}

/// Grid (chunks, B*NH), kThreads threads, HS floats of dynamic shared memory (q).
/// chunks == 1: writes out (B*NH, HS) = (B, C); otherwise the chunk's partials.
template <typename T_, int kVec>
__global__ void __launch_bounds__(kThreads)
    attention_decode_split_kernel(T_* out, float* partial_max, float* partial_sum,
                                  float* partial_out, const T_* qkv, const T_* k_cache,
                                  const T_* v_cache, int NH, int HS, int length, int capacity,
                                  float scale) {
  extern __shared__ float q_shared[];         // (HS)
  __shared__ float weights[kThreads];         // exp(s_j - m) of the chunk's positions
  __shared__ float row_sums[kThreads * kVec];  // (R, packs per pass * kVec)
  __shared__ float reduce_scratch[32];

  const int chunk = blockIdx.x;
  const int chunks = gridDim.x;
  const int64_t bh = blockIdx.y;  // b*NH + h
  const int64_t b = bh / NH;
  const int h = static_cast<int>(bh % NH);
  const int C = NH * HS;
  const int begin = chunk * kThreads;
  const int n = min(kThreads, length - begin);  // positions of this chunk, >= 1
  const T_* keys = k_cache + (bh * capacity + begin) * HS;
  const T_* values = v_cache + (bh * capacity + begin) * HS;

  const T_* q = qkv + b * 3 * C + static_cast<int64_t>(h) * HS;
  for (int i = threadIdx.x; i < HS; i += kThreads) q_shared[i] = to_float(q[i]);
  __syncthreads();

  const int j = threadIdx.x;
  float score = -INFINITY;
  if (j < n) {
    const T_* key = keys + static_cast<int64_t>(j) * HS;
    float dot = 0.0f;
    for (int i = 0; i < HS; i += kVec) {
      float k[kVec];
      load_floats<kVec>(key + i, k);
#pragma unroll
      for (int e = 0; e < kVec; ++e) dot += q_shared[i + e] * k[e];
    }
    score = dot * scale;
  }
  const float max_score = block_reduce_max(score, reduce_scratch);  // finite: n >= 1
  const float weight = j < n ? expf(score - max_score) : 0.0f;
  weights[j] = weight;
  const float sum = block_reduce_sum(weight, reduce_scratch);  // its barriers publish weights

  const int packs = HS / kVec;
  const int packs_per_pass = min(packs, kThreads);
  const int groups = kThreads / packs_per_pass;  // R: position groups
  const int group = threadIdx.x / packs_per_pass;
  for (int pass_begin = 0; pass_begin < packs; pass_begin += packs_per_pass) {
    const int local_pack = threadIdx.x % packs_per_pass;
    const int pack = pass_begin + local_pack;
    if (group < groups && pack < packs) {
      float acc[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[e] = 0.0f;
      for (int p = group; p < n; p += groups) {
        float v[kVec];
        load_floats<kVec>(values + static_cast<int64_t>(p) * HS + pack * kVec, v);
        const float w = weights[p];
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[e] += w * v[e];
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        row_sums[(group * packs_per_pass + local_pack) * kVec + e] = acc[e];
    }
    __syncthreads();
    // Channels [pass_begin*kVec, ...) of this pass, each summed over the groups in order.
    const int pass_channels = min(packs_per_pass, packs - pass_begin) * kVec;
    for (int i = threadIdx.x; i < pass_channels; i += kThreads) {
      float o = 0.0f;
      for (int g = 0; g < groups; ++g) o += row_sums[g * packs_per_pass * kVec + i];
      const int channel = pass_begin * kVec + i;
      if (chunks == 1)
        out[bh * HS + channel] = from_float<T_>(o / sum);
      else
        partial_out[(bh * chunks + chunk) * HS + channel] = o;
    }
    __syncthreads();  // row_sums is rewritten by the next pass
  }
  if (chunks > 1 && threadIdx.x == 0) {
    partial_max[bh * chunks + chunk] = max_score;
    partial_sum[bh * chunks + chunk] = sum;
  }
}

/// Grid (B*NH), kCombineThreads threads: out (B*NH, HS) from the chunks' partials, in chunk
/// order (every thread recomputes the same max and denominator).
template <typename T_>
__global__ void attention_decode_combine_kernel(T_* out, const float* partial_max,
                                                const float* partial_sum,
                                                const float* partial_out, int HS, int chunks) {
  const int64_t bh = blockIdx.x;
  const float* maxes = partial_max + bh * chunks;
  const float* sums = partial_sum + bh * chunks;
  const float* outs = partial_out + bh * chunks * HS;
  float max_score = -INFINITY;
  for (int c = 0; c < chunks; ++c) max_score = fmaxf(max_score, maxes[c]);
  float denominator = 0.0f;
  for (int c = 0; c < chunks; ++c) denominator += expf(maxes[c] - max_score) * sums[c];
  for (int i = threadIdx.x; i < HS; i += blockDim.x) {
    float o = 0.0f;
    for (int c = 0; c < chunks; ++c)
      o += expf(maxes[c] - max_score) * outs[static_cast<int64_t>(c) * HS + i];
    out[bh * HS + i] = from_float<T_>(o / denominator);
  }
}

template <typename T_, int kVec>
void launch_split(T_* out, float* scratch, const T_* qkv, const T_* k_cache, const T_* v_cache,
                  int B, int NH, int HS, int length, int capacity, int chunks, float scale,
                  cudaStream_t stream) {
  const int64_t heads = static_cast<int64_t>(B) * NH;
  float* partial_max = scratch;
  float* partial_sum = partial_max + heads * chunks;
  float* partial_out = partial_sum + heads * chunks;
  const dim3 grid(static_cast<unsigned int>(chunks), static_cast<unsigned int>(heads));
  const size_t shared = static_cast<size_t>(HS) * sizeof(float);
  attention_decode_split_kernel<T_, kVec><<<grid, kThreads, shared, stream>>>(
      out, partial_max, partial_sum, partial_out, qkv, k_cache, v_cache, NH, HS, length,
      capacity, scale);
  GPT2_CUDA_CHECK_LAUNCH();
  if (chunks == 1) return;
  attention_decode_combine_kernel<T_><<<static_cast<unsigned int>(heads), kCombineThreads, 0,
                                        stream>>>(out, partial_max, partial_sum, partial_out, HS,
                                                  chunks);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

int attention_decode_num_chunks(int length) {
  GPT2_CHECK(length >= 1, "decode over ", length, " positions");
  return static_cast<int>(ceil_div(length, kAttentionDecodeChunk));
}

int64_t attention_decode_scratch_floats(int B, int C, int NH, int capacity) {
  GPT2_CHECK(B >= 1 && NH >= 1 && C >= 1 && C % NH == 0 && capacity >= 1, "B=", B, " C=", C,
             " NH=", NH, " capacity=", capacity);
  const int64_t HS = C / NH;
  return static_cast<int64_t>(B) * NH * attention_decode_num_chunks(capacity) * (HS + 2);
}

template <typename T_>
void attention_kv_cache_write(T_* k_cache, T_* v_cache, const T_* qkv, int B, int T, int C,
                              int NH, int pos, int capacity, cudaStream_t stream) {
  GPT2_CHECK(B >= 1 && T >= 1 && NH >= 1 && C >= 1 && C % NH == 0, "B=", B, " T=", T, " C=", C,
             " NH=", NH);
  GPT2_CHECK(pos >= 0 && static_cast<int64_t>(pos) + T <= capacity, "positions [", pos, ", ",
             static_cast<int64_t>(pos) + T, ") in a cache of ", capacity);
  GPT2_CHECK(k_cache != nullptr && v_cache != nullptr && qkv != nullptr);
  const int64_t n = static_cast<int64_t>(B) * T * C;
  kv_cache_write_kernel<<<grid_size(n, kCacheWriteThreads), kCacheWriteThreads, 0, stream>>>(
      k_cache, v_cache, qkv, n, T, C, NH, C / NH, pos, capacity);
  GPT2_CUDA_CHECK_LAUNCH();
}

template <typename T_>
void attention_decode_forward(T_* out, const T_* qkv, const T_* k_cache, const T_* v_cache, int B,
                              int C, int NH, int length, int capacity, float* scratch,
                              cudaStream_t stream) {
  GPT2_CHECK(B >= 1 && NH >= 1 && C >= 1 && C % NH == 0, "B=", B, " C=", C, " NH=", NH);
  GPT2_CHECK(length >= 1 && length <= capacity, "length ", length, " in a cache of ", capacity);
  GPT2_CHECK(static_cast<int64_t>(B) * NH <= 65535, "B*NH = ", static_cast<int64_t>(B) * NH,
             " exceeds the grid limit of 65535");
  GPT2_CHECK(out != nullptr && qkv != nullptr && k_cache != nullptr && v_cache != nullptr &&
             scratch != nullptr);
  const int HS = C / NH;
  GPT2_CHECK(static_cast<int64_t>(HS) * sizeof(float) <= kMaxQueryShared, "head size ", HS,
             " too large for the decode kernel's shared memory");
  const int chunks = attention_decode_num_chunks(length);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(HS)));
  constexpr int kPack = Pack16<T_>::kSize;
  if (HS % kPack == 0 && is_aligned16(k_cache) && is_aligned16(v_cache))
    launch_split<T_, kPack>(out, scratch, qkv, k_cache, v_cache, B, NH, HS, length, capacity,
                            chunks, scale, stream);
  else
    launch_split<T_, 1>(out, scratch, qkv, k_cache, v_cache, B, NH, HS, length, capacity, chunks,
                        scale, stream);
}

template void attention_kv_cache_write<float>(float*, float*, const float*, int, int, int, int,
                                              int, int, cudaStream_t);
template void attention_kv_cache_write<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*,
                                                      const __nv_bfloat16*, int, int, int, int,
                                                      int, int, cudaStream_t);
template void attention_decode_forward<float>(float*, const float*, const float*, const float*,
                                              int, int, int, int, int, float*, cudaStream_t);
template void attention_decode_forward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                                      const __nv_bfloat16*, const __nv_bfloat16*,
                                                      int, int, int, int, int, float*,
                                                      cudaStream_t);

}  // namespace gpt2::gpu
