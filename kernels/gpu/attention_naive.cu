/**
 * @file attention_naive.cu
 * @brief Naive causal attention on the GPU: cuBLAS batched GEMMs around a materialized P.
 *
 * The honest baseline a careful user writes with a good library (contract in attention.cuh;
 * CPU twin cpu::attention_naive_forward/backward):
 *   forward:  q,k,v = permute(qkv) to (B,NH,T,HS); probs = scale Q K^T (one strided-batched
 *             GEMM over B*NH heads, fp32 accumulation, stored in T_); P = causal softmax of
 *             probs in place (one fused kernel: row max and sum in one online pass, then the
 *             write pass; entries above the diagonal written 0); O = P V (GEMM); out =
 *             unpermute(O).
 *   backward: dV = P^T dO; dP = dO V^T into dprobs_scratch; dS = P (dP - rowsum(P dP)) in place;
 *             dQ = scale dS K; dK = scale dS^T Q; dqkv = unpermute(dQ, dK, dV).
 * Row-major (rows, cols) matrices are cuBLAS column-major (cols, rows) matrices: every GEMM
 * below is the transposed product, written out at its call. probs and dprobs_scratch are
 * B*NH*T*T elements; every index into them is 64-bit. Softmax and its backward run one thread
 * block per row, so rows of any length (T up to the memory limit) work.
 */
#include "kernels/gpu/attention.cuh"

#include <cmath>
#include <type_traits>

#include "base/error.h"
#include "kernels/gpu/common.cuh"
#include "kernels/gpu/context.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kSoftmaxThreads = 256;
constexpr int kPermuteThreads = 256;

template <typename T_>
constexpr cudaDataType_t cuda_dtype() {
  return std::is_same_v<T_, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// Element idx of a (B,NH,T,HS) tensor, and the offset of the same (b, t, h, d) in a (B,T,width)
// row-major tensor whose head h occupies channels [h*HS, (h+1)*HS) of each part.
struct HeadElement {
  int64_t idx;
  int64_t row_offset;  // (b*T + t) * width + h*HS + d
  bool valid;
};

__device__ __forceinline__ HeadElement head_element(int B, int T, int NH, int HS, int width) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(B) * NH * T * HS) return {idx, 0, false};
  const int d = static_cast<int>(idx % HS);
  const int t = static_cast<int>((idx / HS) % T);
  const int h = static_cast<int>((idx / (static_cast<int64_t>(HS) * T)) % NH);
  const int64_t b = idx / (static_cast<int64_t>(HS) * T * NH);
  return {idx, (b * T + t) * width + h * HS + d, true};
}

// q, k, v (B,NH,T,HS) <- qkv (B,T,3,NH,HS); with k == v == nullptr only the first third
// (used to permute dout (B,T,NH,HS) with qkv_width = C).
template <typename T_>
__global__ void permute_to_heads_kernel(T_* q, T_* k, T_* v, const T_* src, int B, int T, int NH,
                                        int HS, int src_width) {
  const HeadElement e = head_element(B, T, NH, HS, src_width);
  if (!e.valid) return;
  const int C = NH * HS;
  q[e.idx] = src[e.row_offset];
  if (k != nullptr) {
    k[e.idx] = src[e.row_offset + C];
    v[e.idx] = src[e.row_offset + 2 * C];
  }
}

// dst (B,T,parts*C): part p of row (b,t) <- heads[p] (B,NH,T,HS).
template <typename T_>
__global__ void unpermute_from_heads_kernel(T_* dst, const T_* part0, const T_* part1,
                                            const T_* part2, int B, int T, int NH, int HS,
                                            int dst_width) {
  const HeadElement e = head_element(B, T, NH, HS, dst_width);
  if (!e.valid) return;
  const int C = NH * HS;
  dst[e.row_offset] = part0[e.idx];
  if (part1 != nullptr) {
    dst[e.row_offset + C] = part1[e.idx];
    dst[e.row_offset + 2 * C] = part2[e.idx];
  }
}

// Combine two (max, sum-of-exp relative to max) pairs.
__device__ __forceinline__ void combine_softmax_stats(float& m, float& s, float m2, float s2) {
  const float new_m = fmaxf(m, m2);
  if (new_m == -INFINITY) return;  // both empty
  s = s * expf(m - new_m) + s2 * expf(m2 - new_m);
  m = new_m;
}

// In place: row (bh, t) of probs becomes softmax over keys 0..t, and 0 after.
template <typename T_>
__global__ void __launch_bounds__(kSoftmaxThreads) causal_softmax_kernel(T_* probs, int T) {
  __shared__ float shared_m[32];
  __shared__ float shared_s[32];
  const int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % T);
  T_* x = probs + row * T;
  const int valid = t + 1;

  float m = -INFINITY;
  float s = 0.f;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) {
    const float v = to_float(x[j]);
    if (v > m) {
      s = s * expf(m - v) + 1.f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(kFullWarpMask, m, offset);
    const float s2 = __shfl_xor_sync(kFullWarpMask, s, offset);
    combine_softmax_stats(m, s, m2, s2);
  }
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) {
    shared_m[warp] = m;
    shared_s[warp] = s;
  }
  __syncthreads();
  m = -INFINITY;
  s = 0.f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w)  // warp order: deterministic
    combine_softmax_stats(m, s, shared_m[w], shared_s[w]);
  const float inv_sum = 1.f / s;

  for (int j = threadIdx.x; j < T; j += blockDim.x)
    x[j] = from_float<T_>(j < valid ? expf(to_float(x[j]) - m) * inv_sum : 0.f);
}

// In place: row (bh, t) of dprobs becomes dS = P (dP - sum_k P dP), 0 above the diagonal.
template <typename T_>
__global__ void __launch_bounds__(kSoftmaxThreads)
    causal_softmax_backward_kernel(T_* dprobs, const T_* probs, int T) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % T);
  T_* dp = dprobs + row * T;
  const T_* p = probs + row * T;
  const int valid = t + 1;
  float dot = 0.f;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) dot += to_float(p[j]) * to_float(dp[j]);
  dot = block_reduce_sum(dot, scratch);
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    dp[j] = from_float<T_>(j < valid ? to_float(p[j]) * (to_float(dp[j]) - dot) : 0.f);
}

// C = alpha op(A) op(B) + beta C over `batches` column-major problems (cuBLAS conventions).
template <typename T_>
void gemm_strided_batched(const Context& ctx, cublasOperation_t op_a, cublasOperation_t op_b,
                          int m, int n, int k, float alpha, const T_* a, int lda,
                          int64_t stride_a, const T_* b, int ldb, int64_t stride_b, float beta,
                          T_* c, int ldc, int64_t stride_c, int batches) {
  GPT2_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      ctx.cublas(), op_a, op_b, m, n, k, &alpha, a, cuda_dtype<T_>(), lda, stride_a, b,
      cuda_dtype<T_>(), ldb, stride_b, &beta, c, cuda_dtype<T_>(), ldc, stride_c, batches,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void check_naive_shape(int B, int T, int C, int NH) {
  GPT2_CHECK(B >= 1 && T >= 1 && NH >= 1 && C % NH == 0, "B=", B, " T=", T, " C=", C, " NH=", NH);
  GPT2_CHECK(static_cast<int64_t>(B) * NH * T <= INT32_MAX, "too many softmax rows");
}

}  // namespace

size_t attention_naive_scratch_elems(int B, int T, int C, bool backward) {
  return static_cast<size_t>(backward ? 7 : 4) * B * T * C;
}

template <typename T_>
void attention_naive_forward(T_* out, T_* probs, const T_* qkv, int B, int T, int C, int NH,
                             T_* scratch, const Context& ctx) {
  check_naive_shape(B, T, C, NH);
  const int HS = C / NH;
  const int64_t head_elems = static_cast<int64_t>(T) * HS;
  const int64_t n = static_cast<int64_t>(B) * T * C;
  T_* q = scratch;
  T_* k = q + n;
  T_* v = k + n;
  T_* o = v + n;
  cudaStream_t stream = ctx.stream();
  const unsigned blocks = grid_size(n, kPermuteThreads);

  permute_to_heads_kernel<<<blocks, kPermuteThreads, 0, stream>>>(q, k, v, qkv, B, T, NH, HS,
                                                                   3 * C);
  GPT2_CUDA_CHECK_LAUNCH();
  // probs (row-major T_q x T_k) = scale Q K^T  <=>  column-major probs^T = K Q^T.
  const float scale = static_cast<float>(1.0 / std::sqrt(double(HS)));
  gemm_strided_batched(ctx, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, scale, k, HS, head_elems, q, HS,
                       head_elems, 0.f, probs, T, static_cast<int64_t>(T) * T, B * NH);
  causal_softmax_kernel<<<static_cast<unsigned>(static_cast<int64_t>(B) * NH * T),
                          kSoftmaxThreads, 0, stream>>>(probs, T);
  GPT2_CUDA_CHECK_LAUNCH();
  // O (T_q x HS) = P V  <=>  O^T = V^T P^T.
  gemm_strided_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, 1.f, v, HS, head_elems, probs, T,
                       static_cast<int64_t>(T) * T, 0.f, o, HS, head_elems, B * NH);
  unpermute_from_heads_kernel<T_><<<blocks, kPermuteThreads, 0, stream>>>(
      out, o, nullptr, nullptr, B, T, NH, HS, C);
  GPT2_CUDA_CHECK_LAUNCH();
}

template <typename T_>
void attention_naive_backward(T_* dqkv, const T_* dout, const T_* qkv, const T_* probs, int B,
                              int T, int C, int NH, T_* scratch, T_* dprobs_scratch,
                              const Context& ctx) {
  check_naive_shape(B, T, C, NH);
  const int HS = C / NH;
  const int64_t head_elems = static_cast<int64_t>(T) * HS;
  const int64_t tt = static_cast<int64_t>(T) * T;
  const int64_t n = static_cast<int64_t>(B) * T * C;
  T_* q = scratch;
  T_* k = q + n;
  T_* v = k + n;
  T_* dout_heads = v + n;
  T_* dq = dout_heads + n;
  T_* dk = dq + n;
  T_* dv = dk + n;
  cudaStream_t stream = ctx.stream();
  const unsigned blocks = grid_size(n, kPermuteThreads);
  const float scale = static_cast<float>(1.0 / std::sqrt(double(HS)));

  permute_to_heads_kernel<<<blocks, kPermuteThreads, 0, stream>>>(q, k, v, qkv, B, T, NH, HS,
                                                                   3 * C);
  GPT2_CUDA_CHECK_LAUNCH();
  permute_to_heads_kernel<T_><<<blocks, kPermuteThreads, 0, stream>>>(
      dout_heads, nullptr, nullptr, dout, B, T, NH, HS, C);
  GPT2_CUDA_CHECK_LAUNCH();
  // dV (T_k x HS) = P^T dO  <=>  dV^T = dO^T P.
  gemm_strided_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, 1.f, dout_heads, HS, head_elems,
                       probs, T, tt, 0.f, dv, HS, head_elems, B * NH);
  // dP (T_q x T_k) = dO V^T  <=>  dP^T = V dO^T.
  gemm_strided_batched(ctx, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, 1.f, v, HS, head_elems,
                       dout_heads, HS, head_elems, 0.f, dprobs_scratch, T, tt, B * NH);
  causal_softmax_backward_kernel<<<static_cast<unsigned>(static_cast<int64_t>(B) * NH * T),
                                   kSoftmaxThreads, 0, stream>>>(dprobs_scratch, probs, T);
  GPT2_CUDA_CHECK_LAUNCH();
  // dQ (T_q x HS) = scale dS K  <=>  dQ^T = scale K^T dS^T.
  gemm_strided_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, scale, k, HS, head_elems,
                       dprobs_scratch, T, tt, 0.f, dq, HS, head_elems, B * NH);
  // dK (T_k x HS) = scale dS^T Q  <=>  dK^T = scale Q^T dS.
  gemm_strided_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, scale, q, HS, head_elems,
                       dprobs_scratch, T, tt, 0.f, dk, HS, head_elems, B * NH);
  unpermute_from_heads_kernel<<<blocks, kPermuteThreads, 0, stream>>>(dqkv, dq, dk, dv, B, T, NH,
                                                                      HS, 3 * C);
  GPT2_CUDA_CHECK_LAUNCH();
}

template void attention_naive_forward<float>(float*, float*, const float*, int, int, int, int,
                                             float*, const Context&);
template void attention_naive_forward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*,
                                                     const __nv_bfloat16*, int, int, int, int,
                                                     __nv_bfloat16*, const Context&);
template void attention_naive_backward<float>(float*, const float*, const float*, const float*,
                                              int, int, int, int, float*, float*, const Context&);
template void attention_naive_backward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                                      const __nv_bfloat16*,
                                                      const __nv_bfloat16*, int, int, int, int,
                                                      __nv_bfloat16*, __nv_bfloat16*,
                                                      const Context&);

}  // namespace gpt2::gpu
