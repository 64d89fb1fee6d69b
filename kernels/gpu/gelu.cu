/**
 * @file gelu.cu
 * @brief GELU (tanh approximation) forward and backward; see gelu.cuh for the contract.
 *
 * The math (gelu, gelu_grad) is gelu_device.cuh's.
 */
#include "kernels/gpu/gelu.cuh"

#include "base/error.h"
#include "kernels/gpu/common.cuh"
#include "kernels/gpu/gelu_device.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kThreads = 256;

// ---------------------------------------------------------------------------------------------
// Kernels

template <typename T_>
__global__ void gelu_forward_pack_kernel(T_* out, const T_* inp, int64_t num_packs) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= num_packs) return;
  constexpr int kPack = Pack16<T_>::kSize;
  const Pack16<T_> x = load_pack16(inp + p * kPack);
  Pack16<T_> y;
#pragma unroll
  for (int k = 0; k < kPack; ++k) y.values[k] = from_float<T_>(gelu(to_float(x.values[k])));
  store_pack16(out + p * kPack, y);
}

template <typename T_>
__global__ void gelu_forward_scalar_kernel(T_* out, const T_* inp, int64_t begin, int64_t end) {
  const int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= end) return;
  out[i] = from_float<T_>(gelu(to_float(inp[i])));
}

template <typename T_>
__global__ void gelu_backward_pack_kernel(T_* dinp, const T_* inp, const T_* dout,
                                          int64_t num_packs) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= num_packs) return;
  constexpr int kPack = Pack16<T_>::kSize;
  const Pack16<T_> x = load_pack16(inp + p * kPack);
  const Pack16<T_> g = load_pack16(dout + p * kPack);
  Pack16<T_> d;
#pragma unroll
  for (int k = 0; k < kPack; ++k)
    d.values[k] = from_float<T_>(gelu_grad(to_float(x.values[k])) * to_float(g.values[k]));
  store_pack16(dinp + p * kPack, d);
}

template <typename T_>
__global__ void gelu_backward_scalar_kernel(T_* dinp, const T_* inp, const T_* dout,
                                            int64_t begin, int64_t end) {
  const int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= end) return;
  dinp[i] = from_float<T_>(gelu_grad(to_float(inp[i])) * to_float(dout[i]));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

template <typename T_>
void gelu_forward(T_* out, const T_* inp, int64_t N, cudaStream_t stream) {
  GPT2_CHECK(N >= 0, "N = ", N);
  if (N == 0) return;
  GPT2_CHECK(out != nullptr && inp != nullptr);
  constexpr int kPack = Pack16<T_>::kSize;
  const int64_t num_packs = is_aligned16(out) && is_aligned16(inp) ? N / kPack : 0;
  if (num_packs > 0) {
    gelu_forward_pack_kernel<<<grid_size(num_packs, kThreads), kThreads, 0, stream>>>(out, inp,
                                                                                 num_packs);
    GPT2_CUDA_CHECK_LAUNCH();
  }
  const int64_t begin = num_packs * kPack;
  if (begin < N) {
    gelu_forward_scalar_kernel<<<grid_size(N - begin, kThreads), kThreads, 0, stream>>>(
        out, inp, begin, N);
    GPT2_CUDA_CHECK_LAUNCH();
  }
}

template <typename T_>
void gelu_backward(T_* dinp, const T_* inp, const T_* dout, int64_t N, cudaStream_t stream) {
  GPT2_CHECK(N >= 0, "N = ", N);
  if (N == 0) return;
  GPT2_CHECK(dinp != nullptr && inp != nullptr && dout != nullptr);
  constexpr int kPack = Pack16<T_>::kSize;
  const bool aligned = is_aligned16(dinp) && is_aligned16(inp) && is_aligned16(dout);
  const int64_t num_packs = aligned ? N / kPack : 0;
  if (num_packs > 0) {
    gelu_backward_pack_kernel<<<grid_size(num_packs, kThreads), kThreads, 0, stream>>>(
        dinp, inp, dout, num_packs);
    GPT2_CUDA_CHECK_LAUNCH();
  }
  const int64_t begin = num_packs * kPack;
  if (begin < N) {
    gelu_backward_scalar_kernel<<<grid_size(N - begin, kThreads), kThreads, 0, stream>>>(
        dinp, inp, dout, begin, N);
    GPT2_CUDA_CHECK_LAUNCH();
  }
}

template void gelu_forward<float>(float*, const float*, int64_t, cudaStream_t);
template void gelu_forward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int64_t,
                                          cudaStream_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t, cudaStream_t);
template void gelu_backward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                           const __nv_bfloat16*, int64_t, cudaStream_t);

}  // namespace gpt2::gpu
