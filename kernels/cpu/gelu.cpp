/**
 * @file gelu.cpp
 * @brief GELU, tanh approximation, forward and backward (CPU reference).
 *
 * With u = sqrt(2/pi) (x + 0.044715 x^3):
 *   out  = 0.5 x (1 + tanh u)
 *   dinp = dout * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2))
 * dinp is overwritten (=). Elementwise in Real, parallel over the N elements.
 */
#include "kernels/cpu/gelu.h"

#include <cmath>
#include <cstdint>

namespace gpt2::cpu {
namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

// Below this many elements a parallel region costs more than it saves (much more when the
// cores are shared), so small calls run on the calling thread.
constexpr int64_t kMinParallelElements = int64_t{1} << 16;
}  // namespace

template <typename Real>
void gelu_forward(Real* out, const Real* inp, int64_t N) {
  const Real scale = static_cast<Real>(kSqrt2OverPi);
  const Real cubic = static_cast<Real>(kGeluCubic);
#pragma omp parallel for schedule(static) if (N >= kMinParallelElements)
  for (int64_t i = 0; i < N; ++i) {
    const Real x = inp[i];
    const Real u = scale * (x + cubic * x * x * x);
    out[i] = Real(0.5) * x * (Real(1) + std::tanh(u));
  }
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int64_t N) {
  const Real scale = static_cast<Real>(kSqrt2OverPi);
  const Real cubic = static_cast<Real>(kGeluCubic);
#pragma omp parallel for schedule(static) if (N >= kMinParallelElements)
  for (int64_t i = 0; i < N; ++i) {
    const Real x = inp[i];
    const Real u = scale * (x + cubic * x * x * x);
    const Real tanh_u = std::tanh(u);
    const Real du_dx = scale * (Real(1) + Real(3) * cubic * x * x);
    const Real grad = Real(0.5) * (Real(1) + tanh_u) +
                      Real(0.5) * x * (Real(1) - tanh_u * tanh_u) * du_dx;
    dinp[i] = grad * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace gpt2::cpu
