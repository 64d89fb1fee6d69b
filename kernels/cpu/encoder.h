/**
 * @file encoder.h
 * @brief Token + position embedding (CPU reference).
 *
 * Forward:  out[b,t,:] = wte[inp[b,t], :] + wpe[t, :]
 *   out (B,T,C), inp (B,T) token ids in [0, V), wte (Vp,C), wpe (maxT,C) with T <= maxT.
 * Backward: dwte[inp[b,t], :] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]
 *   Parameter gradients are accumulated (+=).
 * Real is float or double; accumulation is in Real. Deterministic: every output element is
 * written by one thread in a fixed order, independent of the thread count.
 */
#pragma once

namespace gpt2::cpu {

template <typename Real>
void encoder_forward(Real* out, const int* inp, const Real* wte, const Real* wpe,
                     int B, int T, int C);

template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int* inp,
                      int B, int T, int C);

}  // namespace gpt2::cpu
