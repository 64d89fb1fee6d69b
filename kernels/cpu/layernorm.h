/**
 * @file layernorm.h
 * @brief LayerNorm over the channel dimension (CPU reference), eps = kLayerNormEps (1e-5,
 *        kernels/common/layernorm_eps.h).
 *
 * Forward:  mean = E[x], rstd = 1/sqrt(Var[x] + eps) (biased variance),
 *           out = (x - mean) * rstd * weight + bias
 *   out, inp (B,T,C); mean, rstd (B,T) saved for backward; weight, bias (C).
 * Backward: dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout*weight
 *           dweight += sum_bt dout * norm;  dbias += sum_bt dout
 *   dinp is ACCUMULATED (+=): the LayerNorm input is always the residual stream, whose gradient
 *   also receives the skip path. Parameter gradients are accumulated (+=).
 * Means and variances accumulate in double; the parameter-gradient sums over B*T too.
 */
#pragma once

#include "kernels/common/layernorm_eps.h"

namespace gpt2::cpu {

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int B, int T, int C);

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int B, int T, int C);

}  // namespace gpt2::cpu
