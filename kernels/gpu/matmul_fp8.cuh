/**
 * @file matmul_fp8.cuh
 * @brief FP8 GEMMs on Hopper through cuBLASLt (issue 22): E4M3 or E5M2 operands, per-tensor
 *        scales, fp32 accumulation, bf16 output.
 *
 * matmul_fp8(out, a, b, M, N, K, ...): out (M, N) bf16, row-major, = (or += with accumulate)
 *   (a_inverse * A) (b_inverse * B)^T  [+ bias (N) bf16 broadcast over rows]
 * (accumulate: out's bf16 values are C with beta = 1, as in the bf16 GEMMs' +=).
 * with A (M, K) and B (N, K) FP8 codes (kernels/cpu/fp8.h), row-major: both K-major, the only
 * layout Hopper's FP8 tensor cores take (cuBLAS's "TN"), which is why the casts write each
 * tensor in both orders (fp8_cast.cuh). a_inverse and b_inverse are device floats: 1 / the
 * scale each operand was cast with, each on a 16-byte boundary (cuBLASLt refuses others). Not both operands E5M2 (no such tensor-core path). K and
 * N multiples of 16 (cuBLASLt's FP8 leading dimensions). fp32 accumulation throughout (fast
 * accumulation off). Throws gpt2::Error when cuBLASLt offers no algorithm (a GPU before sm_89).
 * CPU reference: the dequantized operands' product in fp64 (tests/gpu/matmul_fp8_test.cpp).
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/cpu/fp8.h"

namespace gpt2::gpu {

class Context;

/// One FP8 operand: its codes, their format and the inverse of their scale (device float).
struct Fp8Operand {
  const uint8_t* codes = nullptr;
  cpu::Fp8Format format = cpu::Fp8Format::kE4M3;
  const float* inverse_scale = nullptr;
};

void matmul_fp8(__nv_bfloat16* out, const Fp8Operand& a, const Fp8Operand& b,
                const __nv_bfloat16* bias, int M, int N, int K, const Context& ctx,
                bool accumulate = false);

}  // namespace gpt2::gpu
