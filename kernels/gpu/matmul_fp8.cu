/**
 * @file matmul_fp8.cu
 * @brief matmul_fp8 (matmul_fp8.cuh) through cuBLASLt.
 *
 * Row-major to column-major as in matmul.cu: out (M, N) row-major is the column-major (N, M)
 * matrix D = B_c^T A_c, with A_c (K, M) and B_c (K, N) the column-major views of A and B:
 * cuBLASLt's m = N, n = M, k = K, A operand = B transposed ("T"), B operand = A ("N"), leading
 * dimensions K, K and N. The scales go in as CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER (the
 * multipliers that dequantize each operand). Descriptors and the heuristic's algorithm are made
 * once per shape and kept in the Context (fp8_matmul_plans).
 */
#include "kernels/gpu/matmul_fp8.cuh"

#include <memory>
#include <unordered_map>

#include "base/error.h"
#include "kernels/gpu/context.cuh"
#include "kernels/gpu/cublaslt_descriptors.cuh"

namespace gpt2::gpu {
namespace {

cudaDataType_t cuda_type(cpu::Fp8Format format) {
  return format == cpu::Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

struct Fp8Plan {
  LtDescriptors desc;
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

using Fp8PlanCache = std::unordered_map<uint64_t, std::unique_ptr<Fp8Plan>>;

const Fp8Plan& fp8_plan(const Context& ctx, const Fp8Operand& a, const Fp8Operand& b,
                        bool bias, int M, int N, int K) {
  std::shared_ptr<void>& slot = ctx.fp8_matmul_plans();
  if (!slot) slot = std::make_shared<Fp8PlanCache>();
  Fp8PlanCache& cache = *static_cast<Fp8PlanCache*>(slot.get());
  // M, N, K < 2^20 each (checked by the caller), the formats and the bias in the low bits.
  const uint64_t key = (uint64_t(M) << 43) | (uint64_t(N) << 23) | (uint64_t(K) << 3) |
                       (uint64_t(a.format == cpu::Fp8Format::kE5M2) << 2) |
                       (uint64_t(b.format == cpu::Fp8Format::kE5M2) << 1) | uint64_t(bias);
  std::unique_ptr<Fp8Plan>& entry = cache[key];
  if (entry) return *entry;
  auto plan = std::make_unique<Fp8Plan>();
  LtDescriptors& desc = plan->desc;
  GPT2_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
           bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  const int8_t fast_accumulation = 0;
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accumulation);
  if (bias) set_desc(desc.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
  GPT2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, cuda_type(b.format), K, N, K));
  GPT2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, cuda_type(a.format), K, M, K));
  GPT2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, CUDA_R_16BF, N, M, N));
  GPT2_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.preference));
  const size_t workspace_bytes = ctx.lt_workspace_bytes();
  GPT2_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      desc.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
      sizeof(workspace_bytes)));
  plan->found = first_algorithm(ctx, desc, &plan->algo);
  entry = std::move(plan);
  return *entry;
}

}  // namespace

void matmul_fp8(__nv_bfloat16* out, const Fp8Operand& a, const Fp8Operand& b,
                const __nv_bfloat16* bias, int M, int N, int K, const Context& ctx) {
  GPT2_CHECK(M >= 1 && N >= 1 && K >= 1 && M < (1 << 20) && N < (1 << 20) && K < (1 << 20),
             "an FP8 GEMM of M=", M, " N=", N, " K=", K);
  GPT2_CHECK(K % 16 == 0 && N % 16 == 0, "FP8 GEMMs need K and N multiples of 16 (K=", K,
             ", N=", N, ")");
  GPT2_CHECK(!(a.format == cpu::Fp8Format::kE5M2 && b.format == cpu::Fp8Format::kE5M2),
             "an FP8 GEMM of two E5M2 operands (no tensor-core path takes it)");
  GPT2_CHECK(a.codes && b.codes && a.inverse_scale && b.inverse_scale && out,
             "an FP8 GEMM without its operands, scales or output");
  const Fp8Plan& plan = fp8_plan(ctx, a, b, bias != nullptr, M, N, K);
  if (!plan.found)
    GPT2_FAIL("cuBLASLt has no FP8 GEMM for M=", M, " N=", N, " K=", K, " (",
              cpu::to_string(a.format), " x ", cpu::to_string(b.format),
              ") on this GPU: FP8 tensor cores need sm_89 or newer");
  // The descriptor's pointers for this call: cuBLASLt's A operand is our B.
  set_desc(plan.desc.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, b.inverse_scale);
  set_desc(plan.desc.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, a.inverse_scale);
  if (bias) set_desc(plan.desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float alpha = 1.0f, beta = 0.0f;
  GPT2_CUBLAS_CHECK(cublasLtMatmul(ctx.cublaslt(), plan.desc.op, &alpha, b.codes, plan.desc.a,
                                   a.codes, plan.desc.b, &beta, out, plan.desc.d, out,
                                   plan.desc.d, &plan.algo, ctx.lt_workspace(),
                                   ctx.lt_workspace_bytes(), ctx.stream()));
}

}  // namespace gpt2::gpu
