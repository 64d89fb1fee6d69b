/**
 * @file residual.cu
 * @brief Residual add forward and backward; see residual.cuh for the contract.
 */
#include "kernels/gpu/residual.cuh"

#include "base/error.h"
#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kThreads = 256;

// ---------------------------------------------------------------------------------------------
// Kernels

template <typename T_>
__global__ void residual_forward_pack_kernel(T_* out, const T_* inp1, const T_* inp2,
                                             int64_t num_packs) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= num_packs) return;
  constexpr int kPack = Pack16<T_>::kSize;
  const Pack16<T_> a = load_pack16(inp1 + p * kPack);
  const Pack16<T_> b = load_pack16(inp2 + p * kPack);
  Pack16<T_> sum;
#pragma unroll
  for (int k = 0; k < kPack; ++k)
    sum.values[k] = from_float<T_>(to_float(a.values[k]) + to_float(b.values[k]));
  store_pack16(out + p * kPack, sum);
}

template <typename T_>
__global__ void residual_forward_scalar_kernel(T_* out, const T_* inp1, const T_* inp2,
                                               int64_t begin, int64_t end) {
  const int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= end) return;
  out[i] = from_float<T_>(to_float(inp1[i]) + to_float(inp2[i]));
}

template <typename T_>
__global__ void residual_backward_pack_kernel(T_* dinp1, T_* dinp2, const T_* dout,
                                              int64_t num_packs) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= num_packs) return;
  constexpr int kPack = Pack16<T_>::kSize;
  const Pack16<T_> g = load_pack16(dout + p * kPack);
  Pack16<T_> d1 = load_pack16(dinp1 + p * kPack);
  Pack16<T_> d2 = load_pack16(dinp2 + p * kPack);
#pragma unroll
  for (int k = 0; k < kPack; ++k) {
    const float grad = to_float(g.values[k]);
    d1.values[k] = from_float<T_>(to_float(d1.values[k]) + grad);
    d2.values[k] = from_float<T_>(to_float(d2.values[k]) + grad);
  }
  store_pack16(dinp1 + p * kPack, d1);
  store_pack16(dinp2 + p * kPack, d2);
}

template <typename T_>
__global__ void residual_backward_scalar_kernel(T_* dinp1, T_* dinp2, const T_* dout,
                                                int64_t begin, int64_t end) {
  const int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= end) return;
  const float grad = to_float(dout[i]);
  dinp1[i] = from_float<T_>(to_float(dinp1[i]) + grad);
  dinp2[i] = from_float<T_>(to_float(dinp2[i]) + grad);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

template <typename T_>
void residual_forward(T_* out, const T_* inp1, const T_* inp2, int64_t N, cudaStream_t stream) {
  GPT2_CHECK(N >= 0, "N = ", N);
  if (N == 0) return;
  GPT2_CHECK(out != nullptr && inp1 != nullptr && inp2 != nullptr);
  constexpr int kPack = Pack16<T_>::kSize;
  const bool aligned = is_aligned16(out) && is_aligned16(inp1) && is_aligned16(inp2);
  const int64_t num_packs = aligned ? N / kPack : 0;
  if (num_packs > 0) {
    residual_forward_pack_kernel<<<grid_size(num_packs, kThreads), kThreads, 0, stream>>>(
        out, inp1, inp2, num_packs);
    GPT2_CUDA_CHECK_LAUNCH();
  }
  const int64_t begin = num_packs * kPack;
  if (begin < N) {
    residual_forward_scalar_kernel<<<grid_size(N - begin, kThreads), kThreads, 0, stream>>>(
        out, inp1, inp2, begin, N);
    GPT2_CUDA_CHECK_LAUNCH();
  }
}

template <typename T_>
void residual_backward(T_* dinp1, T_* dinp2, const T_* dout, int64_t N, cudaStream_t stream) {
  GPT2_CHECK(N >= 0, "N = ", N);
  if (N == 0) return;
  GPT2_CHECK(dinp1 != nullptr && dinp2 != nullptr && dout != nullptr);
  GPT2_CHECK(dinp1 != dinp2, "dinp1 and dinp2 must be different buffers");
  constexpr int kPack = Pack16<T_>::kSize;
  const bool aligned = is_aligned16(dinp1) && is_aligned16(dinp2) && is_aligned16(dout);
  const int64_t num_packs = aligned ? N / kPack : 0;
  if (num_packs > 0) {
    residual_backward_pack_kernel<<<grid_size(num_packs, kThreads), kThreads, 0, stream>>>(
        dinp1, dinp2, dout, num_packs);
    GPT2_CUDA_CHECK_LAUNCH();
  }
  const int64_t begin = num_packs * kPack;
  if (begin < N) {
    residual_backward_scalar_kernel<<<grid_size(N - begin, kThreads), kThreads, 0, stream>>>(
        dinp1, dinp2, dout, begin, N);
    GPT2_CUDA_CHECK_LAUNCH();
  }
}

template void residual_forward<float>(float*, const float*, const float*, int64_t, cudaStream_t);
template void residual_forward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                              const __nv_bfloat16*, int64_t, cudaStream_t);
template void residual_backward<float>(float*, float*, const float*, int64_t, cudaStream_t);
template void residual_backward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*,
                                               const __nv_bfloat16*, int64_t, cudaStream_t);

}  // namespace gpt2::gpu
