/**
 * @file layernorm.cpp
 * @brief LayerNorm over channels, forward and backward (CPU reference), eps = kLayerNormEps.
 *
 * Forward, per row (b,t) of C channels: mean and biased variance in double, rstd =
 * 1/sqrt(var + eps), out = (x - mean) * rstd * weight + bias; mean and rstd saved (B,T).
 * Backward: dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout *
 * weight, with the two row means in double; dweight += sum_bt dout * norm and dbias +=
 * sum_bt dout, summed over B*T in double. All gradients are accumulated (+=).
 * Parallel scheme: rows for the forward and for dinp; channel strips (each walking the rows
 * in order) for dweight and dbias, so every sum has a fixed order independent of the thread
 * count. norm is recomputed from the saved mean and rstd, never stored.
 */
#include "kernels/cpu/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "base/error.h"

namespace gpt2::cpu {
namespace {
// Below this many elements a parallel region costs more than it saves (much more when the
// cores are shared), so small calls run on the calling thread.
constexpr int64_t kMinParallelElements = int64_t{1} << 15;
}  // namespace

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int B, int T, int C) {
  GPT2_CHECK(B > 0 && T > 0 && C > 0, "B=", B, " T=", T, " C=", C);
  const int64_t BT = static_cast<int64_t>(B) * T;
#pragma omp parallel for schedule(static) if (BT * C >= kMinParallelElements)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const Real* x = inp + bt * C;
    double sum = 0.0;
    for (int c = 0; c < C; ++c) sum += x[c];
    const double row_mean = sum / C;
    double squares = 0.0;
    for (int c = 0; c < C; ++c) {
      const double centered = x[c] - row_mean;
      squares += centered * centered;
    }
    const double row_rstd = 1.0 / std::sqrt(squares / C + kLayerNormEps);
    Real* y = out + bt * C;
    for (int c = 0; c < C; ++c)
      y[c] = static_cast<Real>((x[c] - row_mean) * row_rstd * weight[c] + bias[c]);
    mean[bt] = static_cast<Real>(row_mean);
    rstd[bt] = static_cast<Real>(row_rstd);
  }
}

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int B, int T,
                        int C) {
  GPT2_CHECK(B > 0 && T > 0 && C > 0, "B=", B, " T=", T, " C=", C);
  const int64_t BT = static_cast<int64_t>(B) * T;
#pragma omp parallel for schedule(static) if (BT * C >= kMinParallelElements)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const Real* x = inp + bt * C;
    const Real* dy = dout + bt * C;
    const double row_mean = mean[bt];
    const double row_rstd = rstd[bt];
    double dnorm_sum = 0.0;
    double dnorm_norm_sum = 0.0;
    for (int c = 0; c < C; ++c) {
      const double norm = (x[c] - row_mean) * row_rstd;
      const double dnorm = static_cast<double>(dy[c]) * weight[c];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * norm;
    }
    const double dnorm_mean = dnorm_sum / C;
    const double dnorm_norm_mean = dnorm_norm_sum / C;
    Real* dx = dinp + bt * C;
    for (int c = 0; c < C; ++c) {
      const double norm = (x[c] - row_mean) * row_rstd;
      const double dnorm = static_cast<double>(dy[c]) * weight[c];
      dx[c] += static_cast<Real>(row_rstd * (dnorm - dnorm_mean - norm * dnorm_norm_mean));
    }
  }

  constexpr int kStrip = 64;
  const int num_strips = (C + kStrip - 1) / kStrip;
#pragma omp parallel for schedule(static) if (BT * C >= kMinParallelElements)
  for (int s = 0; s < num_strips; ++s) {
    const int c0 = s * kStrip;
    const int width = std::min(kStrip, C - c0);
    double dweight_sum[kStrip] = {};
    double dbias_sum[kStrip] = {};
    for (int64_t bt = 0; bt < BT; ++bt) {
      const Real* x = inp + bt * C + c0;
      const Real* dy = dout + bt * C + c0;
      const double row_mean = mean[bt];
      const double row_rstd = rstd[bt];
      for (int j = 0; j < width; ++j) {
        dweight_sum[j] += static_cast<double>(dy[j]) * ((x[j] - row_mean) * row_rstd);
        dbias_sum[j] += dy[j];
      }
    }
    for (int j = 0; j < width; ++j) {
      dweight[c0 + j] += static_cast<Real>(dweight_sum[j]);
      dbias[c0 + j] += static_cast<Real>(dbias_sum[j]);
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int, int, int);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int, int, int);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int, int,
                                         int);

}  // namespace gpt2::cpu
