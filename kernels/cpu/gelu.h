/**
 * @file gelu.h
 * @brief GELU, tanh approximation (CPU reference), as GPT-2.
 *
 * Forward:  out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * Backward: dinp = gelu'(x) * dout        (overwritten, =)
 *   out, inp, dinp, dout: N elements. Elementwise, computed in Real.
 */
#pragma once

#include <cstdint>

namespace gpt2::cpu {

template <typename Real>
void gelu_forward(Real* out, const Real* inp, int64_t N);

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int64_t N);

}  // namespace gpt2::cpu
