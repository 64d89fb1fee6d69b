#include "kernels/cpu/residual.h"

namespace gpt2::cpu {

template <typename Real>
void residual_forward(Real* out, const Real* inp1, const Real* inp2, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) out[i] = inp1[i] + inp2[i];
}

template <typename Real>
void residual_backward(Real* dinp1, Real* dinp2, const Real* dout, int64_t N) {
#pragma omp parallel for schedule(static)
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
