/**
 * @file encoder.cu
 * @brief Token + position embedding forward and deterministic backward; see encoder.cuh.
 *
 * bucket_scratch layout: positions[B*T] (bt indices sorted by (token, bt)), then
 * starts[num_buckets + 1] (bucket k owns positions[starts[k] .. starts[k+1])). A bucket's
 * token is read back as inp[positions[starts[k]]], so inp and inp_host must agree.
 */
#include "kernels/gpu/encoder.cuh"

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kThreads = 256;

// ---------------------------------------------------------------------------------------------
// Kernels

/// One thread per element of out (B,T,C).
template <typename T_>
__global__ void encoder_forward_kernel(T_* out, const int* inp, const T_* wte, const T_* wpe,
                                       int64_t num_elements, int T, int C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_elements) return;
  const int64_t bt = i / C;
  const int c = static_cast<int>(i % C);
  const int t = static_cast<int>(bt % T);
  const int64_t token = inp[bt];
  const float sum = to_float(wte[token * C + c]) + to_float(wpe[static_cast<int64_t>(t) * C + c]);
  out[i] = from_float<T_>(sum);
}

/// Grid (num_buckets, ceil(C / blockDim.x)): thread = (token bucket, channel).
template <typename T_>
__global__ void encoder_backward_wte_kernel(T_* dwte, const T_* dout, const int* inp,
                                            const int* positions, const int* starts, int C) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int begin = starts[blockIdx.x];
  const int end = starts[blockIdx.x + 1];
  float sum = 0.0f;
  for (int k = begin; k < end; ++k)
    sum += to_float(dout[static_cast<int64_t>(positions[k]) * C + c]);
  T_* row = dwte + static_cast<int64_t>(inp[positions[begin]]) * C;
  row[c] = from_float<T_>(to_float(row[c]) + sum);
}

/// One thread per element (t, c) of dwpe's first T rows; sums over b in order.
template <typename T_>
__global__ void encoder_backward_wpe_kernel(T_* dwpe, const T_* dout, int B, int64_t TC) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= TC) return;
  float sum = 0.0f;
  for (int b = 0; b < B; ++b) sum += to_float(dout[b * TC + i]);
  dwpe[i] = from_float<T_>(to_float(dwpe[i]) + sum);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

template <typename T_>
void encoder_forward(T_* out, const int* inp, const T_* wte, const T_* wpe, int B, int T, int C,
                     cudaStream_t stream) {
  GPT2_CHECK(B >= 1 && T >= 1 && C >= 1, "B=", B, " T=", T, " C=", C);
  GPT2_CHECK(out != nullptr && inp != nullptr && wte != nullptr && wpe != nullptr);
  const int64_t num_elements = static_cast<int64_t>(B) * T * C;
  encoder_forward_kernel<<<grid_size(num_elements, kThreads), kThreads, 0, stream>>>(
      out, inp, wte, wpe, num_elements, T, C);
  GPT2_CUDA_CHECK_LAUNCH();
}

int64_t encoder_backward_scratch_ints(int B, int T) {
  return 2 * static_cast<int64_t>(B) * T + 1;
}

template <typename T_>
void encoder_backward(T_* dwte, T_* dwpe, const T_* dout, const int* inp, int B, int T, int C,
                      const int* inp_host, int* bucket_scratch, cudaStream_t stream) {
  GPT2_CHECK(B >= 1 && T >= 1 && C >= 1, "B=", B, " T=", T, " C=", C);
  GPT2_CHECK(dwte != nullptr && dwpe != nullptr && dout != nullptr && inp != nullptr);
  GPT2_CHECK(inp_host != nullptr && bucket_scratch != nullptr);
  const int64_t BT = static_cast<int64_t>(B) * T;
  GPT2_CHECK(BT <= INT32_MAX, "B*T = ", BT, " does not fit the int positions");
  GPT2_CHECK(C <= 65535LL * kThreads, "C = ", C, " exceeds the grid's y dimension");

  // Sort keys (token << 32 | bt): ordered by token, then by position within a token.
  std::vector<uint64_t> keys(static_cast<size_t>(BT));
  for (int64_t bt = 0; bt < BT; ++bt) {
    GPT2_CHECK(inp_host[bt] >= 0, "negative token id ", inp_host[bt], " at position ", bt);
    keys[bt] = (static_cast<uint64_t>(inp_host[bt]) << 32) | static_cast<uint64_t>(bt);
  }
  std::sort(keys.begin(), keys.end());
  std::vector<int> buckets;  // positions, then starts
  buckets.reserve(static_cast<size_t>(2 * BT + 1));
  for (uint64_t key : keys) buckets.push_back(static_cast<int>(key & 0xffffffffu));
  int num_buckets = 0;
  for (int64_t k = 0; k < BT; ++k) {
    if (k == 0 || (keys[k] >> 32) != (keys[k - 1] >> 32)) {
      buckets.push_back(static_cast<int>(k));
      ++num_buckets;
    }
  }
  buckets.push_back(static_cast<int>(BT));
  GPT2_CUDA_CHECK(cudaMemcpyAsync(bucket_scratch, buckets.data(), buckets.size() * sizeof(int),
                                  cudaMemcpyHostToDevice, stream));
  const int* positions = bucket_scratch;
  const int* starts = bucket_scratch + BT;

  const dim3 wte_grid(static_cast<unsigned int>(num_buckets),
                      static_cast<unsigned int>(ceil_div(C, kThreads)));
  encoder_backward_wte_kernel<<<wte_grid, kThreads, 0, stream>>>(dwte, dout, inp, positions,
                                                                 starts, C);
  GPT2_CUDA_CHECK_LAUNCH();

  const int64_t TC = static_cast<int64_t>(T) * C;
  encoder_backward_wpe_kernel<<<grid_size(TC, kThreads), kThreads, 0, stream>>>(dwpe, dout, B,
                                                                                TC);
  GPT2_CUDA_CHECK_LAUNCH();
}

template void encoder_forward<float>(float*, const int*, const float*, const float*, int, int,
                                     int, cudaStream_t);
template void encoder_forward<__nv_bfloat16>(__nv_bfloat16*, const int*, const __nv_bfloat16*,
                                             const __nv_bfloat16*, int, int, int, cudaStream_t);
template void encoder_backward<float>(float*, float*, const float*, const int*, int, int, int,
                                      const int*, int*, cudaStream_t);
template void encoder_backward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*,
                                              const __nv_bfloat16*, const int*, int, int, int,
                                              const int*, int*, cudaStream_t);

}  // namespace gpt2::gpu
