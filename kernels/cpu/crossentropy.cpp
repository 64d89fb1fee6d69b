/**
 * @file crossentropy.cpp
 * @brief Softmax + cross-entropy over the first V of Vp padded logit columns (CPU reference).
 *
 * Per row bt (B*T rows of Vp logits): max and sum of exp(logit - max) over v < V in double,
 * lse = max + log(sum), losses[bt] = lse - logit[target], probs[v] = exp(logit - max) / sum
 * for v < V (for Real = float rounded twice: exp to float, then the product) and 0 for the
 * padding columns [V, Vp).
 * Backward: dlogits[v] = (probs[v] - [v == target]) * dlosses[bt] for v < V, 0 for padding;
 * overwritten (=). Forward + backward: the two composed through a temporary probs.
 * Parallel over rows; each row is one thread's, so results do not depend on the thread count. Row offsets bt * Vp are 64-bit. targets must be in [0, V) (checked, before
 * the parallel loop: nothing may throw inside an OpenMP region).
 */
#include "kernels/cpu/crossentropy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/error.h"

namespace gpt2::cpu {
namespace {
// Below this many elements a parallel region costs more than it saves (much more when the
// cores are shared), so small calls run on the calling thread.
constexpr int64_t kMinParallelElements = int64_t{1} << 15;
}  // namespace

template <typename Real>
void crossentropy_forward(Real* losses, Real* probs, const Real* logits, const int* targets,
                          int B, int T, int V, int Vp) {
  GPT2_CHECK(B > 0 && T > 0 && V > 0 && V <= Vp, "B=", B, " T=", T, " V=", V, " Vp=", Vp);
  const int64_t BT = static_cast<int64_t>(B) * T;
  for (int64_t bt = 0; bt < BT; ++bt)
    GPT2_CHECK(targets[bt] >= 0 && targets[bt] < V, "target ", targets[bt], " at ", bt);
#pragma omp parallel for schedule(static) if (BT * Vp >= kMinParallelElements)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const Real* row = logits + bt * Vp;
    double max_logit = row[0];
    for (int v = 1; v < V; ++v) max_logit = std::max(max_logit, static_cast<double>(row[v]));
    // One exp per logit (the cost of this op): the exponentials are parked in probs, then
    // normalized in place; the sum is taken from the unrounded doubles.
    Real* prob_row = probs + bt * Vp;
    double sum = 0.0;
    for (int v = 0; v < V; ++v) {
      const double e = std::exp(row[v] - max_logit);
      prob_row[v] = static_cast<Real>(e);
      sum += e;
    }
    const double inv_sum = 1.0 / sum;
    for (int v = 0; v < V; ++v) prob_row[v] = static_cast<Real>(prob_row[v] * inv_sum);
    for (int v = V; v < Vp; ++v) prob_row[v] = Real(0);
    const double lse = max_logit + std::log(sum);
    losses[bt] = static_cast<Real>(lse - row[targets[bt]]);
  }
}

template <typename Real>
void crossentropy_backward(Real* dlogits, const Real* dlosses, const Real* probs,
                           const int* targets, int B, int T, int V, int Vp) {
  GPT2_CHECK(B > 0 && T > 0 && V > 0 && V <= Vp, "B=", B, " T=", T, " V=", V, " Vp=", Vp);
  const int64_t BT = static_cast<int64_t>(B) * T;
  for (int64_t bt = 0; bt < BT; ++bt)
    GPT2_CHECK(targets[bt] >= 0 && targets[bt] < V, "target ", targets[bt], " at ", bt);
#pragma omp parallel for schedule(static) if (BT * Vp >= kMinParallelElements)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const Real* prob_row = probs + bt * Vp;
    Real* drow = dlogits + bt * Vp;
    const Real dloss = dlosses[bt];
    for (int v = 0; v < V; ++v) drow[v] = prob_row[v] * dloss;
    drow[targets[bt]] = (prob_row[targets[bt]] - Real(1)) * dloss;
    for (int v = V; v < Vp; ++v) drow[v] = Real(0);
  }
}

template <typename Real>
void crossentropy_forward_backward(Real* losses, Real* dlogits, const Real* logits,
                                   const int* targets, Real dloss, int B, int T, int V, int Vp) {
  // The two references composed: the very same numbers as forward then backward. The forward
  // has read every logit into probs before the backward writes dlogits, so they may alias.
  const int64_t BT = static_cast<int64_t>(B) * T;
  std::vector<Real> probs(static_cast<size_t>(BT) * Vp);
  crossentropy_forward(losses, probs.data(), logits, targets, B, T, V, Vp);
  const std::vector<Real> dlosses(static_cast<size_t>(BT), dloss);
  crossentropy_backward(dlogits, dlosses.data(), probs.data(), targets, B, T, V, Vp);
}

template void crossentropy_forward<float>(float*, float*, const float*, const int*, int, int, int,
                                          int);
template void crossentropy_forward<double>(double*, double*, const double*, const int*, int, int,
                                           int, int);
template void crossentropy_backward<float>(float*, const float*, const float*, const int*, int,
                                           int, int, int);
template void crossentropy_backward<double>(double*, const double*, const double*, const int*,
                                            int, int, int, int);
template void crossentropy_forward_backward<float>(float*, float*, const float*, const int*,
                                                   float, int, int, int, int);
template void crossentropy_forward_backward<double>(double*, double*, const double*, const int*,
                                                    double, int, int, int, int);

}  // namespace gpt2::cpu
