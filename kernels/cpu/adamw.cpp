/**
 * @file adamw.cpp
 * @brief AdamW update, decoupled weight decay as PyTorch (CPU reference).
 *
 * Per element: g = grad * grad_scale; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
 * params -= lr * (m / (1 - beta1^t) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * params).
 * The bias corrections 1 - beta^t are computed once in double (a float pow loses digits as
 * beta^t nears 1 - eps) and rounded to float; the per-element arithmetic is float, as on the
 * GPU. Elementwise and parallel over the N elements, so deterministic for any thread count.
 */
#include "kernels/cpu/adamw.h"

#include <cmath>
#include <cstdint>

#include "base/error.h"

namespace gpt2::cpu {
namespace {
// Below this many elements a parallel region costs more than it saves (much more when the
// cores are shared), so small calls run on the calling thread.
constexpr int64_t kMinParallelElements = int64_t{1} << 16;
}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t N,
                  const AdamWHyper& hyper, int t, float grad_scale) {
  GPT2_CHECK(t >= 1, "AdamW step t is 1-based, got ", t);
  const float correction1 = static_cast<float>(1.0 - std::pow(double(hyper.beta1), t));
  const float correction2 = static_cast<float>(1.0 - std::pow(double(hyper.beta2), t));
  const float beta1 = hyper.beta1;
  const float beta2 = hyper.beta2;
#pragma omp parallel for schedule(static) if (N >= kMinParallelElements)
  for (int64_t i = 0; i < N; ++i) {
    const float g = grads[i] * grad_scale;
    const float m_i = beta1 * m[i] + (1.0f - beta1) * g;
    const float v_i = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = m_i;
    v[i] = v_i;
    const float m_hat = m_i / correction1;
    const float v_hat = v_i / correction2;
    params[i] -= hyper.lr * (m_hat / (std::sqrt(v_hat) + hyper.eps) +
                             hyper.weight_decay * params[i]);
  }
}

}  // namespace gpt2::cpu
