/**
 * @file attention_flash_common.cuh
 * @brief What every flash-attention kernel shares, the portable ones (attention_flash_tiles.cuh)
 *        and the Hopper ones (attention_hopper_*.cu): the log-domain constants and the shape
 *        check of their launchers.
 */
#pragma once

#include "base/error.h"

namespace gpt2::gpu::flash {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// Checks the shape every flash launcher accepts; returns the head size (64 or 128).
inline int checked_head_size(int B, int T, int C, int NH) {
  GPT2_CHECK(B >= 1 && T >= 1 && NH >= 1 && C % NH == 0, "B=", B, " T=", T, " C=", C, " NH=", NH);
  GPT2_CHECK(B * NH <= 65535, "B*NH=", B * NH, " exceeds the grid's y limit");
  const int head_size = C / NH;
  GPT2_CHECK(head_size == 64 || head_size == 128,
             "flash attention supports head size 64 or 128, got ", head_size);
  return head_size;
}

}  // namespace gpt2::gpu::flash
