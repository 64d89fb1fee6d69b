/**
 * @file encoder.cpp
 * @brief Token + position embedding, forward and backward (CPU reference).
 *
 * Forward: out[b,t,:] = wte[inp[b,t], :] + wpe[t, :], parallel over the B*T rows.
 * Backward: dwte[inp[b,t], :] += dout[b,t,:] and dwpe[t, :] += dout[b,t,:] (accumulated).
 * A token can repeat within the batch, so rows of dwte receive several contributions; the
 * backward therefore splits the work by channel strips instead of rows: each thread owns a
 * strip of channels and walks the B*T rows in order, so every gradient element is summed in
 * the same order whatever the thread count, with no atomics. Accumulation in Real.
 * Token ids are not range-checked here (V is not passed); the data loader guarantees [0, V).
 */
#include "kernels/cpu/encoder.h"

#include <algorithm>
#include <cstdint>

#include "base/error.h"

namespace gpt2::cpu {
namespace {
// Below this many elements a parallel region costs more than it saves (much more when the
// cores are shared), so small calls run on the calling thread.
constexpr int64_t kMinParallelElements = int64_t{1} << 16;
}  // namespace

template <typename Real>
void encoder_forward(Real* out, const int* inp, const Real* wte, const Real* wpe,
                     int B, int T, int C) {
  GPT2_CHECK(B > 0 && T > 0 && C > 0, "B=", B, " T=", T, " C=", C);
  const int64_t BT = static_cast<int64_t>(B) * T;
#pragma omp parallel for schedule(static) if (BT * C >= kMinParallelElements)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const Real* wte_row = wte + static_cast<int64_t>(inp[bt]) * C;
    const Real* wpe_row = wpe + (bt % T) * C;
    Real* out_row = out + bt * C;
    for (int c = 0; c < C; ++c) out_row[c] = wte_row[c] + wpe_row[c];
  }
}

template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int* inp,
                      int B, int T, int C) {
  GPT2_CHECK(B > 0 && T > 0 && C > 0, "B=", B, " T=", T, " C=", C);
  const int64_t BT = static_cast<int64_t>(B) * T;
  constexpr int kStrip = 64;  // channels per task: a quarter of a cache page, several SIMD rows
  const int num_strips = (C + kStrip - 1) / kStrip;
#pragma omp parallel for schedule(static) if (BT * C >= kMinParallelElements)
  for (int s = 0; s < num_strips; ++s) {
    const int c0 = s * kStrip;
    const int c1 = std::min(C, c0 + kStrip);
    for (int64_t bt = 0; bt < BT; ++bt) {
      const Real* dout_row = dout + bt * C;
      Real* dwte_row = dwte + static_cast<int64_t>(inp[bt]) * C;
      Real* dwpe_row = dwpe + (bt % T) * C;
      for (int c = c0; c < c1; ++c) {
        dwte_row[c] += dout_row[c];
        dwpe_row[c] += dout_row[c];
      }
    }
  }
}

template void encoder_forward<float>(float*, const int*, const float*, const float*, int, int,
                                     int);
template void encoder_forward<double>(double*, const int*, const double*, const double*, int,
                                      int, int);
template void encoder_backward<float>(float*, float*, const float*, const int*, int, int, int);
template void encoder_backward<double>(double*, double*, const double*, const int*, int, int,
                                       int);

}  // namespace gpt2::cpu
