/**
 * @file matmul.h
 * @brief Dense layer out = inp @ weight^T + bias (CPU reference), PyTorch/llm.c layout.
 *
 * Forward:  out[bt, o] = sum_i inp[bt, i] * weight[o, i] + bias[o]
 *   out (B,T,OC), inp (B,T,C), weight (OC,C), bias (OC) or nullptr.
 * Backward: dinp = dout @ weight            (overwritten, =; skipped when dinp is nullptr)
 *           dweight += dout^T @ inp         (accumulated, +=)
 *           dbias += sum_bt dout            (accumulated, +=; skipped when dbias is nullptr)
 * Sums over B*T (weight and bias gradients) accumulate in double; dot products over C and OC
 * accumulate in Real. Parallelized over output rows/columns with OpenMP; each output element is
 * computed by one thread in a fixed order, so results do not depend on the thread count.
 */
#pragma once

namespace gpt2::cpu {

template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias,
                    int B, int T, int C, int OC);

template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int B, int T, int C, int OC);

}  // namespace gpt2::cpu
