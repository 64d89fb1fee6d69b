/**
 * @file adamw.cu
 * @brief AdamW update with optional fp32 master weights; see adamw.cuh.
 */
#include "kernels/gpu/adamw.cuh"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "base/error.h"
#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;  // grid-stride beyond this

struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1;  // 1 - beta1^t
  float bias_correction2;  // 1 - beta2^t
  float grad_scale;
};

template <typename T_, typename G_>
__global__ void adamw_kernel(T_* params, float* master, const G_* grads, float* m, float* v,
                             int64_t N, AdamWStep s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N;
       i += stride) {
    const float g = to_float(grads[i]) * s.grad_scale;
    const float m_new = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    const float v_new = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    m[i] = m_new;
    v[i] = v_new;
    const float m_hat = m_new / s.bias_correction1;
    const float v_hat = v_new / s.bias_correction2;
    float p = master ? master[i] : to_float(params[i]);
    p -= s.lr * (m_hat / (sqrtf(v_hat) + s.eps) + s.weight_decay * p);
    if (master) master[i] = p;
    params[i] = from_float<T_>(p);
  }
}

}  // namespace

template <typename T_, typename G_>
void adamw_update(T_* params, float* master, const G_* grads, float* m, float* v, int64_t N,
                  const cpu::AdamWHyper& hyper, int t, float grad_scale, cudaStream_t stream) {
  GPT2_CHECK(N >= 0, "N = ", N);
  GPT2_CHECK(t >= 1, "AdamW step t = ", t, " (1-based)");
  if constexpr (std::is_same_v<T_, float>) {
    GPT2_CHECK(master == nullptr, "fp32 parameters are their own master weights");
  } else {
    GPT2_CHECK(master != nullptr, "bf16 parameters need fp32 master weights");
  }
  if (N == 0) return;
  GPT2_CHECK(params != nullptr && grads != nullptr && m != nullptr && v != nullptr);
  AdamWStep step{};
  step.lr = hyper.lr;
  step.beta1 = hyper.beta1;
  step.beta2 = hyper.beta2;
  step.eps = hyper.eps;
  step.weight_decay = hyper.weight_decay;
  step.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(hyper.beta1), t));
  step.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(hyper.beta2), t));
  step.grad_scale = grad_scale;
  const int64_t blocks = std::min(ceil_div(N, kThreads), kMaxBlocks);
  adamw_kernel<<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(params, master, grads,
                                                                          m, v, N, step);
  GPT2_CUDA_CHECK_LAUNCH();
}

template void adamw_update<float, float>(float*, float*, const float*, float*, float*, int64_t,
                                         const cpu::AdamWHyper&, int, float, cudaStream_t);
template void adamw_update<__nv_bfloat16, __nv_bfloat16>(__nv_bfloat16*, float*,
                                                         const __nv_bfloat16*, float*, float*,
                                                         int64_t, const cpu::AdamWHyper&, int,
                                                         float, cudaStream_t);
template void adamw_update<__nv_bfloat16, float>(__nv_bfloat16*, float*, const float*, float*,
                                                 float*, int64_t, const cpu::AdamWHyper&, int,
                                                 float, cudaStream_t);

}  // namespace gpt2::gpu
