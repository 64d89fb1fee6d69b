/**
 * @file layernorm_eps.h
 * @brief GPT-2's LayerNorm epsilon, shared by the CPU and GPU LayerNorms and the Hugging Face
 *        config (layer_norm_epsilon) the project reads and writes.
 */
#pragma once

namespace gpt2 {

constexpr double kLayerNormEps = 1e-5;

}  // namespace gpt2
