/**
 * @file layernorm_fp8.cuh
 * @brief LayerNorm whose output goes straight to FP8 codes (--precision fp8, issue 22): the
 *        forward of the LayerNorms before qkv and fc writes those GEMMs' E4M3 operands itself,
 *        so the bf16 output is never stored and read back by a cast.
 *
 * layernorm_forward_fp8 / residual_layernorm_forward_fp8 are layernorm_forward /
 * residual_layernorm_forward (layernorm.cuh) with `out` replaced by an Fp8Destination: the
 * codes of y * (*scale), y the bf16 output those would store, in both orders (rows (B*T, C) and
 * transposed (C, B*T); either may be null), and *amax raised to max |y| over the finite
 * values: the bits of the bf16 LayerNorm then fp8_cast_transpose (fp8_cast.cuh) to E4M3.
 * mean, rstd and residual_out as there. The destination's format must be E4M3 (an input's).
 * Needs the packed form (bf16, C a multiple of 8 and at
 * most 2048, 16-byte aligned inputs): layernorm_fp8_supported(C) says whether C allows it.
 * Parallel scheme: a warp per row (layernorm_row.cuh), each row's codes to `rows` from
 * registers, and with both orders wanted `transposed` then by fp8_transpose from `rows`; with
 * `transposed` alone, through a block's shared tile of 32 rows (layernorm_fp8.cu).
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/gpu/fp8_cast.cuh"

namespace gpt2::gpu {

bool layernorm_fp8_supported(int C);

void layernorm_forward_fp8(const Fp8Destination& out, float* mean, float* rstd,
                           const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                           const __nv_bfloat16* bias, int B, int T, int C, cudaStream_t stream);

void residual_layernorm_forward_fp8(__nv_bfloat16* residual_out, const Fp8Destination& out,
                                    float* mean, float* rstd, const __nv_bfloat16* residual,
                                    const __nv_bfloat16* addend, const __nv_bfloat16* weight,
                                    const __nv_bfloat16* bias, int B, int T, int C,
                                    cudaStream_t stream);

}  // namespace gpt2::gpu
