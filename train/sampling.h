/**
 * @file sampling.h
 * @brief Text generation during training: multinomial sampling at temperature 1.
 *
 * generate_tokens() starts from <|endoftext|> and appends num_tokens tokens, each drawn from
 * Model::next_token_probs() with one rng.uniform() per token, so the sequence depends only on
 * the parameters and the RNG state (saved in the training state for bitwise resume). When the
 * text outgrows the model's micro-batch length T, the model sees the last T tokens.
 * Sampling overwrites the model's activations but never its gradients or optimizer state.
 */
#pragma once

#include <vector>

#include "base/rng.h"
#include "model/model.h"

namespace gpt2 {

/// The first index whose cumulative probability exceeds coin (coin in [0, 1)); when rounding
/// leaves the total below coin, the last index with a non-zero probability.
int sample_multinomial(const float* probs, int n, double coin);

/// The num_tokens generated tokens (the leading <|endoftext|> prompt excluded).
std::vector<int> generate_tokens(Model& model, int num_tokens, Rng& rng);

}  // namespace gpt2
