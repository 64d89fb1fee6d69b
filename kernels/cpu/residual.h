/**
 * @file residual.h
 * @brief Residual add (CPU reference).
 *
 * Forward:  out = inp1 + inp2                         (N elements)
 * Backward: dinp1 += dout; dinp2 += dout            (accumulated: the fan-out of the residual
 *   stream, both branches receive other gradient contributions as well)
 * The model usually needs no residual_backward call: it lets both branches share one
 * residual-gradient buffer (see layernorm_backward's += contract).
 */
#pragma once

#include <cstdint>

namespace gpt2::cpu {

template <typename Real>
void residual_forward(Real* out, const Real* inp1, const Real* inp2, int64_t N);

template <typename Real>
void residual_backward(Real* dinp1, Real* dinp2, const Real* dout, int64_t N);

}  // namespace gpt2::cpu
