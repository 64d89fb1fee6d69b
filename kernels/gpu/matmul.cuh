/**
 * @file matmul.cuh
 * @brief Dense layer out = inp @ weight^T + bias on the GPU (cuBLASLt / cuBLAS).
 *        CPU twin: kernels/cpu/matmul.h (same math, layouts and contracts).
 *
 * Forward:  out = inp @ weight^T + bias           (overwritten, =)
 *   out (B,T,OC), inp (B,T,C), weight (OC,C), bias (OC) or nullptr; all row-major, T_.
 * Backward: dinp = dout @ weight                  (overwritten, =; skipped when dinp is nullptr)
 *           dweight += dout^T @ inp               (accumulated, +=: GEMM with beta = 1)
 *           dbias += sum_bt dout                  (accumulated, +=; skipped when dbias is nullptr)
 *   dbias is a deterministic two-pass column sum (no atomics) using dbias_scratch:
 *   matmul_backward_scratch_floats(B,T,OC) floats (nullptr allowed when dbias is nullptr).
 * T_ = float: fp32 inputs and outputs with CUBLAS_COMPUTE_32F: exact fp32, no TF32.
 * T_ = __nv_bfloat16: bf16 inputs and outputs, fp32 accumulation (CUBLAS_COMPUTE_32F), one
 *   rounding to bf16 per output (the bias is added inside the GEMM epilogue). The weight
 *   gradient's += is two roundings: cuBLAS rounds the product to bf16 before adding the old
 *   value (dweight = round(round(dout^T inp) + dweight), measured on H200, cuBLAS of CUDA 13.0,
 *   both cuBLASLt and cublasGemmEx). It is exact when dweight starts at 0 (the first
 *   micro-batch); each further micro-batch adds one bf16 rounding of its own contribution.
 * cuBLAS(Lt) results are bitwise reproducible for the same toolkit, GPU architecture and SM
 * count on one stream (cuBLAS docs, "results reproducibility"); our own kernels are too.
 * Context::use_cublaslt() picks cuBLASLt (bias in its epilogue) or cublasGemmEx plus a bias
 * kernel; cuBLASLt falls back to the latter when it has no algorithm for the shape/alignment
 * or the bias is not 16-byte aligned. Any C, OC >= 1; B*T, C, OC must fit in int.
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/gpu/context.cuh"

namespace gpt2::gpu {

template <typename T_>
void matmul_forward(T_* out, const T_* inp, const T_* weight, const T_* bias, int B, int T, int C,
                    int OC, const Context& ctx);

/// The fc layer's forward in one GEMM: pre_gelu = inp @ weight^T + bias and
/// out_gelu = gelu(pre_gelu) (tanh form), both (B,T,OC), overwritten. CPU twin: matmul_forward
/// then gelu_forward. Uses cuBLASLt's GELU_AUX_BIAS epilogue (GELU applied to the fp32 result,
/// the pre-GELU value stored as the "aux" output) when the Context allows cuBLASLt and it has an
/// algorithm; otherwise matmul_forward into pre_gelu, then gelu_forward.
template <typename T_>
void matmul_forward_gelu(T_* out_gelu, T_* pre_gelu, const T_* inp, const T_* weight,
                         const T_* bias, int B, int T, int C, int OC, const Context& ctx);

/// Floats of dbias_scratch matmul_backward needs.
int64_t matmul_backward_scratch_floats(int B, int T, int OC);

/// dbias += sum_bt dout (dout (B,T,OC)): matmul_backward's bias gradient alone (the same
/// two-pass column sum), for GEMMs made elsewhere (the FP8 path, model/cuda_fp8_linears.cuh).
template <typename T_>
void matmul_bias_backward(T_* dbias, const T_* dout, int B, int T, int OC, float* dbias_scratch,
                          const Context& ctx);

template <typename T_>
void matmul_backward(T_* dinp, T_* dweight, T_* dbias, const T_* dout, const T_* inp,
                     const T_* weight, int B, int T, int C, int OC, float* dbias_scratch,
                     const Context& ctx);

/// The backward of a dense layer whose input is gelu(pre_gelu) (the fcproj layer), with the
/// GELU's backward folded in: dpre_gelu = gelu'(pre_gelu) * (dout @ weight) (overwritten, (B,T,C)),
/// dweight += dout^T @ gelu_out, dbias += sum_bt dout (as matmul_backward with inp = gelu_out).
/// CPU twin: matmul_backward, then gelu_backward. Uses cuBLASLt's DGELU epilogue (gelu' of
/// the aux input, tanh form, times the fp32 result: one rounding) when the Context allows
/// cuBLASLt and it has an algorithm; otherwise the dinp GEMM into dpre_gelu, then gelu_backward
/// in place (two roundings in bf16).
template <typename T_>
void matmul_backward_gelu(T_* dpre_gelu, T_* dweight, T_* dbias, const T_* dout,
                          const T_* gelu_out, const T_* pre_gelu, const T_* weight, int B, int T,
                          int C, int OC, float* dbias_scratch, const Context& ctx);

}  // namespace gpt2::gpu
