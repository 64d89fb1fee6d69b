/**
 * @file adamw.cuh
 * @brief AdamW parameter update on the GPU. CPU twin: kernels/cpu/adamw.h (same math).
 *
 *   g = grads * grad_scale; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2
 *   p -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p),  m_hat = m / (1 - beta1^t),
 *   v_hat = v / (1 - beta2^t), t >= 1 (bias corrections computed on the host in double).
 * N elements; m, v fp32, updated in place. All math in fp32.
 *   T_ = float: master must be nullptr; params are the fp32 weights, updated directly.
 *   T_ = __nv_bfloat16: master holds the fp32 weights; p is read from and written to master,
 *     then params = master rounded to bf16 (round-to-nearest-even).
 * Grads are G_: the parameters' type, or fp32 (the reduced gradient shard of data parallel).
 * Parallel scheme: one thread per element (grid-stride); elementwise, deterministic.
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cpu/adamw.h"

namespace gpt2::gpu {

template <typename T_, typename G_ = T_>
void adamw_update(T_* params, float* master, const G_* grads, float* m, float* v, int64_t N,
                  const cpu::AdamWHyper& hyper, int t, float grad_scale, cudaStream_t stream);

}  // namespace gpt2::gpu
