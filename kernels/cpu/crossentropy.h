/**
 * @file crossentropy.h
 * @brief Softmax + cross-entropy over the real vocabulary of padded logits (CPU reference).
 *
 * logits (B,T,Vp): only the first V columns are the vocabulary; columns [V, Vp) are padding,
 * excluded from the softmax. targets (B,T) in [0, V).
 * Forward:  probs[bt, v] = softmax(logits[bt, :V])[v] for v < V, 0 for padding;
 *           losses[bt] = -log probs[bt, targets[bt]]          (losses (B,T), probs (B,T,Vp))
 * Backward: dlogits[bt, v] = (probs[bt, v] - [v == target]) * dlosses[bt] for v < V, 0 for
 *           padding columns (overwritten, =). dlosses (B,T); usually 1/(B*T*accumulation).
 * Forward + backward (the GPU's fused op, crossentropy.cuh): losses as the forward and dlogits
 *           as the backward with every dlosses[bt] = dloss, one scalar; probs are not returned
 *           (a temporary); dlogits may alias logits (in place).
 * Max and sum of exponentials accumulate in double; losses are computed as lse - logit.
 */
#pragma once

namespace gpt2::cpu {

template <typename Real>
void crossentropy_forward(Real* losses, Real* probs, const Real* logits, const int* targets,
                          int B, int T, int V, int Vp);

template <typename Real>
void crossentropy_backward(Real* dlogits, const Real* dlosses, const Real* probs,
                           const int* targets, int B, int T, int V, int Vp);

template <typename Real>
void crossentropy_forward_backward(Real* losses, Real* dlogits, const Real* logits,
                                   const int* targets, Real dloss, int B, int T, int V, int Vp);

}  // namespace gpt2::cpu
