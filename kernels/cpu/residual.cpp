/**
 * @file residual.cpp
 * @brief Residual add, forward and backward (CPU reference).
 *
 * Forward: out = inp1 + inp2. Backward: dinp1 += dout and dinp2 += dout (accumulated).
 * Elementwise in Real, parallel over the N elements; each element is one thread's, so results
 * do not depend on the thread count.
 */
#include "kernels/cpu/residual.h"

namespace gpt2::cpu {
namespace {
// Below this many elements a parallel region costs more than it saves (much more when the
// cores are shared), so small calls run on the calling thread.
constexpr int64_t kMinParallelElements = int64_t{1} << 16;
}  // namespace

template <typename Real>
void residual_forward(Real* out, const Real* inp1, const Real* inp2, int64_t N) {
#pragma omp parallel for schedule(static) if (N >= kMinParallelElements)
  for (int64_t i = 0; i < N; ++i) out[i] = inp1[i] + inp2[i];
}

template <typename Real>
void residual_backward(Real* dinp1, Real* dinp2, const Real* dout, int64_t N) {
#pragma omp parallel for schedule(static) if (N >= kMinParallelElements)
  for (int64_t i = 0; i < N; ++i) {
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
  }
}

template void residual_forward<float>(float*, const float*, const float*, int64_t);
template void residual_forward<double>(double*, const double*, const double*, int64_t);
template void residual_backward<float>(float*, float*, const float*, int64_t);
template void residual_backward<double>(double*, double*, const double*, int64_t);

}  // namespace gpt2::cpu
