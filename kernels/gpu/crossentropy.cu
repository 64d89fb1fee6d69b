/**
 * @file crossentropy.cu
 * @brief Cross-entropy forward (losses only) and backward (softmax recomputed, in place
 *        allowed); see crossentropy.cuh.
 */
#include "kernels/gpu/crossentropy.cuh"

#include <cmath>

#include "kernels/common/error.h"
#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kThreads = 512;

struct RowSoftmax {
  float max;
  float sum;  // sum of exp(logit - max) over the V real columns
};

/// Max and sum of exponentials of one row, returned to every thread of the block.
template <typename T_>
__device__ RowSoftmax row_softmax_stats(const T_* row, int V, float* scratch) {
  float local_max = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) local_max = fmaxf(local_max, to_float(row[v]));
  const float row_max = block_reduce_max(local_max, scratch);
  float local_sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) local_sum += expf(to_float(row[v]) - row_max);
  return {row_max, block_reduce_sum(local_sum, scratch)};
}

// ---------------------------------------------------------------------------------------------
// Kernels

/// One block per row.
template <typename T_>
__global__ void crossentropy_forward_kernel(float* losses, const T_* logits, const int* targets,
                                            int V, int Vp) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T_* x = logits + row * Vp;
  const RowSoftmax stats = row_softmax_stats(x, V, scratch);
  if (threadIdx.x == 0) {
    const int target = targets[row];
    losses[row] = (target >= 0 && target < V)
                      ? logf(stats.sum) + stats.max - to_float(x[target])
                      : NAN;
  }
}

/// One block per row; the row's reads all finish inside row_softmax_stats (its block
/// reductions end with barriers) before the first write, so dlogits may alias logits.
template <typename T_>
__global__ void crossentropy_backward_kernel(T_* dlogits, const float* dlosses, const T_* logits,
                                             const int* targets, int V, int Vp) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T_* x = logits + row * Vp;
  const RowSoftmax stats = row_softmax_stats(x, V, scratch);
  const int target = targets[row];
  const float dloss = (target >= 0 && target < V) ? dlosses[row] : NAN;
  const float inv_sum = 1.0f / stats.sum;
  T_* dx = dlogits + row * Vp;
  for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
    float grad = 0.0f;
    if (v < V) {
      const float prob = expf(to_float(x[v]) - stats.max) * inv_sum;
      grad = (prob - (v == target ? 1.0f : 0.0f)) * dloss;
    }
    dx[v] = from_float<T_>(grad);
  }
}

void check_shapes(int B, int T, int V, int Vp) {
  GPT2_CHECK(B >= 1 && T >= 1, "B=", B, " T=", T);
  GPT2_CHECK(V >= 1 && Vp >= V, "V=", V, " Vp=", Vp);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

template <typename T_>
void crossentropy_forward(float* losses, const T_* logits, const int* targets, int B, int T,
                          int V, int Vp, cudaStream_t stream) {
  check_shapes(B, T, V, Vp);
  GPT2_CHECK(losses != nullptr && logits != nullptr && targets != nullptr);
  const int64_t rows = static_cast<int64_t>(B) * T;
  crossentropy_forward_kernel<<<grid_size(rows, 1), kThreads, 0, stream>>>(losses, logits,
                                                                           targets, V, Vp);
  GPT2_CUDA_CHECK_LAUNCH();
}

template <typename T_>
void crossentropy_backward(T_* dlogits, const float* dlosses, const T_* logits,
                           const int* targets, int B, int T, int V, int Vp, cudaStream_t stream) {
  check_shapes(B, T, V, Vp);
  GPT2_CHECK(dlogits != nullptr && dlosses != nullptr && logits != nullptr && targets != nullptr);
  const int64_t rows = static_cast<int64_t>(B) * T;
  crossentropy_backward_kernel<<<grid_size(rows, 1), kThreads, 0, stream>>>(
      dlogits, dlosses, logits, targets, V, Vp);
  GPT2_CUDA_CHECK_LAUNCH();
}

template void crossentropy_forward<float>(float*, const float*, const int*, int, int, int, int,
                                          cudaStream_t);
template void crossentropy_forward<__nv_bfloat16>(float*, const __nv_bfloat16*, const int*, int,
                                                  int, int, int, cudaStream_t);
template void crossentropy_backward<float>(float*, const float*, const float*, const int*, int,
                                           int, int, int, cudaStream_t);
template void crossentropy_backward<__nv_bfloat16>(__nv_bfloat16*, const float*,
                                                   const __nv_bfloat16*, const int*, int, int,
                                                   int, int, cudaStream_t);

}  // namespace gpt2::gpu
