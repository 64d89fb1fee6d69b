/**
 * @file matmul_fp8.cu
 * @brief matmul_fp8 (matmul_fp8.cuh) through cuBLASLt.
 *
 * Row-major to column-major as in matmul.cu: out (M, N) row-major is the column-major (N, M)
 * matrix D = B_c^T A_c, with A_c (K, M) and B_c (K, N) the column-major views of A and B:
 * cuBLASLt's m = N, n = M, k = K, A operand = B transposed ("T"), B operand = A ("N"), leading
 * dimensions K, K and N. The scales go in as CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER (the
 * multipliers that dequantize each operand). Descriptors and the heuristic's candidate algorithms
 * are made once per shape and kept in the Context (fp8_matmul_plans); the first candidate that
 * runs is kept.
 */
#include "kernels/gpu/matmul_fp8.cuh"

#include <memory>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "kernels/gpu/context.cuh"
#include "kernels/gpu/cublaslt_descriptors.cuh"

namespace gpt2::gpu {
namespace {

cudaDataType_t cuda_type(cpu::Fp8Format format) {
  return format == cpu::Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

// cuBLASLt's heuristic may rank first an algorithm that cublasLtMatmul then refuses for an FP8
// shape ("not supported"), so a plan keeps the heuristic's first few and settles on the first
// that runs (tried at the plan's first call; each refusal launches nothing).
constexpr int kCandidateAlgorithms = 8;

struct Fp8Plan {
  LtDescriptors desc;
  std::vector<cublasLtMatmulAlgo_t> candidates;
  size_t chosen = 0;  // index into candidates; settled once one has run
  bool settled = false;
};

using Fp8PlanCache = std::unordered_map<uint64_t, std::unique_ptr<Fp8Plan>>;

Fp8Plan& fp8_plan(const Context& ctx, const Fp8Operand& a, const Fp8Operand& b, bool bias,
                  bool accumulate, int M, int N, int K) {
  std::shared_ptr<void>& slot = ctx.fp8_matmul_plans();
  if (!slot) slot = std::make_shared<Fp8PlanCache>();
  Fp8PlanCache& cache = *static_cast<Fp8PlanCache*>(slot.get());
  // M, N, K < 2^20 each (checked by the caller); formats, bias and accumulation in the low bits.
  const uint64_t key = (uint64_t(M) << 44) | (uint64_t(N) << 24) | (uint64_t(K) << 4) |
                       (uint64_t(a.format == cpu::Fp8Format::kE5M2) << 3) |
                       (uint64_t(b.format == cpu::Fp8Format::kE5M2) << 2) |
                       (uint64_t(bias) << 1) | uint64_t(accumulate);
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
  cublasLtMatmulHeuristicResult_t results[kCandidateAlgorithms] = {};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      ctx.cublaslt(), desc.op, desc.a, desc.b, desc.d, desc.d, desc.preference,
      kCandidateAlgorithms, results, &found);
  if (status == CUBLAS_STATUS_SUCCESS)
    for (int i = 0; i < found; ++i) plan->candidates.push_back(results[i].algo);
  entry = std::move(plan);
  return *entry;
}

}  // namespace

void matmul_fp8(__nv_bfloat16* out, const Fp8Operand& a, const Fp8Operand& b,
                const __nv_bfloat16* bias, int M, int N, int K, const Context& ctx,
                bool accumulate) {
  GPT2_CHECK(M >= 1 && N >= 1 && K >= 1 && M < (1 << 20) && N < (1 << 20) && K < (1 << 20),
             "an FP8 GEMM of M=", M, " N=", N, " K=", K);
  GPT2_CHECK(K % 16 == 0 && N % 16 == 0, "FP8 GEMMs need K and N multiples of 16 (K=", K,
             ", N=", N, ")");
  GPT2_CHECK(!(a.format == cpu::Fp8Format::kE5M2 && b.format == cpu::Fp8Format::kE5M2),
             "an FP8 GEMM of two E5M2 operands (no tensor-core path takes it)");
  GPT2_CHECK(a.codes && b.codes && a.inverse_scale && b.inverse_scale && out,
             "an FP8 GEMM without its operands, scales or output");
  // cuBLASLt refuses ("not supported") scale pointers off a 16-byte boundary (CUDA 13.0, H200).
  GPT2_CHECK(alignment_bytes(a.inverse_scale) >= 16 && alignment_bytes(b.inverse_scale) >= 16,
             "FP8 GEMM scales must sit on 16-byte boundaries");
  Fp8Plan& plan = fp8_plan(ctx, a, b, bias != nullptr, accumulate, M, N, K);
  // The descriptor's pointers for this call: cuBLASLt's A operand is our B.
  set_desc(plan.desc.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, b.inverse_scale);
  set_desc(plan.desc.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, a.inverse_scale);
  if (bias) set_desc(plan.desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;
  for (; plan.chosen < plan.candidates.size(); ++plan.chosen) {
    status = cublasLtMatmul(ctx.cublaslt(), plan.desc.op, &alpha, b.codes, plan.desc.a, a.codes,
                            plan.desc.b, &beta, out, plan.desc.d, out, plan.desc.d,
                            &plan.candidates[plan.chosen], ctx.lt_workspace(),
                            ctx.lt_workspace_bytes(), ctx.stream());
    if (status != CUBLAS_STATUS_NOT_SUPPORTED || plan.settled) break;
  }
  if (plan.chosen == plan.candidates.size())
    GPT2_FAIL("cuBLASLt has no FP8 GEMM that runs for M=", M, " N=", N, " K=", K, " (",
              cpu::to_string(a.format), " x ", cpu::to_string(b.format), ", ",
              plan.candidates.size(), " candidates) on this GPU: FP8 tensor cores need sm_89 "
              "or newer");
  GPT2_CUBLAS_CHECK(status);
  plan.settled = true;
}

}  // namespace gpt2::gpu
