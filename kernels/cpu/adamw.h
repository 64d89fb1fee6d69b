/**
 * @file adamw.h
 * @brief AdamW parameter update (CPU reference), decoupled weight decay as PyTorch.
 *
 *   g = grads * grad_scale                 (grad_scale folds in gradient clipping)
 *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
 *   m_hat = m / (1 - beta1^t);    v_hat = v / (1 - beta2^t)      (t = 1 for the first step)
 *   params -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * params)
 * params, grads, m, v: N floats; m, v updated in place. Elementwise, deterministic.
 */
#pragma once

#include <cstdint>

#include "kernels/common/adamw_hyper.h"

namespace gpt2::cpu {

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t N,
                  const AdamWHyper& hyper, int t, float grad_scale);

}  // namespace gpt2::cpu
