/**
 * @file parameters.h
 * @brief GPT-2 parameter tensors: llm.c's order and shapes, one flat buffer, GPT-2 init.
 *
 * Order (sizes):  wte (Vp,C), wpe (maxT,C), ln1w (L,C), ln1b (L,C), qkvw (L,3C,C), qkvb (L,3C),
 *   attprojw (L,C,C), attprojb (L,C), ln2w (L,C), ln2b (L,C), fcw (L,4C,C), fcb (L,4C),
 *   fcprojw (L,C,4C), fcprojb (L,C), lnfw (C), lnfb (C).
 * All sizes and offsets are 64-bit (wpe alone is 100M elements at maxT = 131072, C = 768).
 * Init (GPT-2): weights ~ normal(0, 0.02), residual projections (attprojw, fcprojw) scaled by
 *   1/sqrt(2L), biases 0, LayerNorm weights 1; the padding rows [V, Vp) of wte are 0.
 *   Each tensor draws from its own stream seeded by (seed, tensor index), so one tensor's size
 *   (e.g. maxT) does not change another tensor's values.
 * Weight decay applies to the 2-D weights only: wte, wpe, qkvw, attprojw, fcw, fcprojw.
 */
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "model/config.h"

namespace gpt2 {

enum ParamTensor : int {
  kWte, kWpe, kLn1w, kLn1b, kQkvw, kQkvb, kAttprojw, kAttprojb,
  kLn2w, kLn2b, kFcw, kFcb, kFcprojw, kFcprojb, kLnfw, kLnfb,
  kNumParamTensors
};

struct ParameterLayout {
  std::array<size_t, kNumParamTensors> sizes{};
  std::array<size_t, kNumParamTensors> offsets{};
  size_t total = 0;

  static ParameterLayout for_config(const ModelConfig& config);
  static const char* name(int tensor);      // "wte", "wpe", ...
  static bool decays(int tensor);           // weight decay applies
  static bool is_per_layer(int tensor);     // leading L dimension
};

/// Fills params (layout.total floats) with GPT-2's initialization.
void init_parameters(float* params, const ModelConfig& config, uint64_t seed);

}  // namespace gpt2
