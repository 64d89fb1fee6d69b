/**
 * @file matmul_fp8.cuh
 * @brief FP8 GEMMs on Hopper through cuBLASLt (issue 22): E4M3 or E5M2 operands, per-tensor
 *        scales, fp32 accumulation, bf16 output, matmul.cuh's epilogues.
 *
 * out (M, N) bf16, row-major, = (a_inverse * A) (b_inverse * B)^T, then the epilogue: + bias
 * (N) broadcast over rows; GELU (out = gelu, the pre-GELU values to an aux matrix) or DGELU
 * (out scaled by gelu' of an aux matrix); or out += (beta = 1, out's bf16 values as C).
 * A (M, K) and B (N, K) are FP8 codes (kernels/cpu/fp8.h), row-major: both K-major, the only
 * layout Hopper's FP8 tensor cores take (cuBLAS's "TN"), which is why the casts write each
 * tensor in both orders (fp8_cast.cuh). a_inverse and b_inverse are device floats, 1 / the
 * scale each operand was cast with, each on a 16-byte boundary (cuBLASLt refuses others). Not
 * both operands E5M2 (no such tensor-core path). K and N multiples of 16 (cuBLASLt's FP8
 * leading dimensions). Fast accumulation off unless the epilogue asks for it. CPU reference:
 * the dequantized operands' product in fp64 (tests/gpu/matmul_fp8_test.cpp).
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

/// What a GEMM adds around its product (all optional), as matmul.cuh's epilogues do.
struct Fp8Epilogue {
  const __nv_bfloat16* bias = nullptr;  // (N), added to every row
  /// out = gelu(product [+ bias]) and gelu_aux (M, N) = product [+ bias] (tanh GELU in fp32).
  __nv_bfloat16* gelu_aux = nullptr;
  /// out = gelu'(dgelu_aux) * product, dgelu_aux (M, N) the forward's pre-GELU values.
  const __nv_bfloat16* dgelu_aux = nullptr;
  bool accumulate = false;  // out += (beta = 1) instead of out =
  /// Hopper's fast FP8 accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM): the tensor cores' own
  /// partial sums (about 14 bits kept) all the way along K, without cuBLASLt's periodic moves
  /// to fp32. Faster, less exact; Transformer Engine's default for forward GEMMs only.
  bool fast_accumulation = false;
};

/// The GEMM with an epilogue; false (nothing launched) when cuBLASLt has no algorithm that runs
/// it here (a GPU before sm_89, or an epilogue it does not pair with FP8 operands).
bool try_matmul_fp8(__nv_bfloat16* out, const Fp8Operand& a, const Fp8Operand& b, int M, int N,
                    int K, const Fp8Epilogue& epilogue, const Context& ctx);

/// try_matmul_fp8, throwing gpt2::Error when it cannot run.
void matmul_fp8(__nv_bfloat16* out, const Fp8Operand& a, const Fp8Operand& b, int M, int N,
                int K, const Fp8Epilogue& epilogue, const Context& ctx);

/// The GEMM with at most a bias and accumulation; throws gpt2::Error when it cannot run.
void matmul_fp8(__nv_bfloat16* out, const Fp8Operand& a, const Fp8Operand& b,
                const __nv_bfloat16* bias, int M, int N, int K, const Context& ctx,
                bool accumulate = false);

}  // namespace gpt2::gpu
