/**
 * @file matmul_fp8.cu
 * @brief matmul_fp8 and try_matmul_fp8 (matmul_fp8.cuh) through cuBLASLt.
 *
 * Row-major to column-major as in matmul.cu: out (M, N) row-major is the column-major (N, M)
 * matrix D = B_c^T A_c, with A_c (K, M) and B_c (K, N) the column-major views of A and B:
 * cuBLASLt's m = N, n = M, k = K, A operand = B transposed ("T"), B operand = A ("N"), leading
 * dimensions K, K and N. The scales go in as CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER (the
 * multipliers that dequantize each operand); the epilogues (bias, GELU with its aux output,
 * DGELU) and beta = 1 as matmul.cu uses them, the aux matrix bf16 with out's layout. Split-K
 * only with fp32 partials, as in matmul.cu. Descriptors and the heuristic's candidate
 * algorithms are made once per shape, epilogue and alignment and kept in the Context
 * (fp8_matmul_plans); the shape's first call picks one of them with choose_algorithm
 * (cublaslt_tuning.cuh: the fastest of those bitwise equal to the first that runs; the
 * heuristic may rank first an algorithm that cublasLtMatmul then refuses, "not supported",
 * and each refusal launches nothing).
 */
#include "kernels/gpu/matmul_fp8.cuh"

#include <memory>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "kernels/gpu/context.cuh"
#include "kernels/gpu/cublaslt_descriptors.cuh"
#include "kernels/gpu/cublaslt_tuning.cuh"

namespace gpt2::gpu {
namespace {

cudaDataType_t cuda_type(cpu::Fp8Format format) {
  return format == cpu::Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

cublasLtEpilogue_t epilogue_of(const Fp8Epilogue& e) {
  return epilogue_for(e.bias != nullptr, e.gelu_aux != nullptr, e.dgelu_aux != nullptr);
}

struct Fp8Plan {
  LtDescriptors desc;
  std::vector<cublasLtMatmulAlgo_t> candidates;
  size_t chosen = 0;  // index into candidates, once settled
  bool settled = false;  // chosen by choose_algorithm on the shape's first call that ran
};

struct Fp8PlanKey {
  int m, n, k;
  bool a_e5m2, b_e5m2, accumulate, fast_accumulation;
  cublasLtEpilogue_t epilogue;
  uint32_t align_a, align_b, align_d;
  bool operator==(const Fp8PlanKey& o) const {
    return m == o.m && n == o.n && k == o.k && a_e5m2 == o.a_e5m2 && b_e5m2 == o.b_e5m2 &&
           accumulate == o.accumulate && fast_accumulation == o.fast_accumulation &&
           epilogue == o.epilogue && align_a == o.align_a && align_b == o.align_b &&
           align_d == o.align_d;
  }
};

struct Fp8PlanKeyHash {
  size_t operator()(const Fp8PlanKey& key) const {
    return hash_key_fields({key.m, key.n, key.k, key.a_e5m2, key.b_e5m2, key.accumulate,
                            key.fast_accumulation, int64_t(key.epilogue),
                            key.align_a, key.align_b, key.align_d});
  }
};

using Fp8PlanCache = std::unordered_map<Fp8PlanKey, std::unique_ptr<Fp8Plan>, Fp8PlanKeyHash>;

void set_call_pointers(cublasLtMatmulDesc_t op, const Fp8Operand& a, const Fp8Operand& b,
                       const Fp8Epilogue& e) {
  // cuBLASLt's A operand is our B.
  set_desc(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, b.inverse_scale);
  set_desc(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, a.inverse_scale);
  if (e.bias) set_desc(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, e.bias);
  if (e.gelu_aux) set_desc(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, e.gelu_aux);
  if (e.dgelu_aux) set_desc(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, e.dgelu_aux);
}

Fp8Plan& fp8_plan(const Context& ctx, const void* out, const Fp8Operand& a, const Fp8Operand& b,
                  const Fp8Epilogue& e, int M, int N, int K) {
  std::shared_ptr<void>& slot = ctx.fp8_matmul_plans();
  if (!slot) slot = std::make_shared<Fp8PlanCache>();
  Fp8PlanCache& cache = *static_cast<Fp8PlanCache*>(slot.get());
  const Fp8PlanKey key{N, M, K, a.format == cpu::Fp8Format::kE5M2,
                       b.format == cpu::Fp8Format::kE5M2, e.accumulate,
                       e.fast_accumulation, epilogue_of(e),
                       alignment_bytes(b.codes), alignment_bytes(a.codes), alignment_bytes(out)};
  std::unique_ptr<Fp8Plan>& entry = cache[key];
  if (entry) return *entry;
  auto plan = std::make_unique<Fp8Plan>();
  LtDescriptors& desc = plan->desc;
  GPT2_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, key.epilogue);
  const int8_t fast_accumulation = e.fast_accumulation ? 1 : 0;
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accumulation);
  if (e.bias) set_desc(desc.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
  if (e.gelu_aux || e.dgelu_aux) {
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(N));
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, CUDA_R_16BF);
  }
  set_call_pointers(desc.op, a, b, e);
  GPT2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, cuda_type(b.format), K, N, K));
  GPT2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, cuda_type(a.format), K, M, K));
  GPT2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, CUDA_R_16BF, N, M, N));
  make_preference(ctx, desc, key.align_a, key.align_b, key.align_d);
  plan->candidates = heuristic_candidates(ctx, desc);
  entry = std::move(plan);
  return *entry;
}

}  // namespace

bool try_matmul_fp8(__nv_bfloat16* out, const Fp8Operand& a, const Fp8Operand& b, int M, int N,
                    int K, const Fp8Epilogue& epilogue, const Context& ctx) {
  GPT2_CHECK(M >= 1 && N >= 1 && K >= 1, "an FP8 GEMM of M=", M, " N=", N, " K=", K);
  GPT2_CHECK(K % 16 == 0 && N % 16 == 0, "FP8 GEMMs need K and N multiples of 16 (K=", K,
             ", N=", N, ")");
  GPT2_CHECK(!(a.format == cpu::Fp8Format::kE5M2 && b.format == cpu::Fp8Format::kE5M2),
             "an FP8 GEMM of two E5M2 operands (no tensor-core path takes it)");
  GPT2_CHECK(a.codes && b.codes && a.inverse_scale && b.inverse_scale && out,
             "an FP8 GEMM without its operands, scales or output");
  // cuBLASLt refuses ("not supported") scale pointers off a 16-byte boundary.
  GPT2_CHECK(alignment_bytes(a.inverse_scale) >= 16 && alignment_bytes(b.inverse_scale) >= 16,
             "FP8 GEMM scales must sit on 16-byte boundaries");
  GPT2_CHECK(!(epilogue.gelu_aux && epilogue.dgelu_aux), "GELU and DGELU in one FP8 GEMM");
  Fp8Plan& plan = fp8_plan(ctx, out, a, b, epilogue, M, N, K);
  if (plan.candidates.empty()) return false;
  set_call_pointers(plan.desc.op, a, b, epilogue);
  const float alpha = 1.0f, beta = epilogue.accumulate ? 1.0f : 0.0f;
  auto launch = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(ctx.cublaslt(), plan.desc.op, &alpha, b.codes, plan.desc.a, a.codes,
                          plan.desc.b, &beta, out, plan.desc.d, out, plan.desc.d, &algo,
                          ctx.lt_workspace(), ctx.lt_workspace_bytes(), ctx.stream());
  };
  if (!plan.settled) {
    const size_t out_bytes = size_t(M) * N * sizeof(__nv_bfloat16);
    GemmTrial trial{launch, {{out, out_bytes}}};
    if (epilogue.gelu_aux) trial.outputs.push_back({epilogue.gelu_aux, out_bytes});
    trial.repeatable = epilogue.dgelu_aux != out;
    if (epilogue.accumulate) {
      trial.accumulated = out;
      trial.accumulated_bytes = out_bytes;
    }
    plan.chosen = choose_algorithm(ctx, plan.candidates, trial);
    plan.settled = plan.chosen < plan.candidates.size();
    if (!plan.settled) plan.candidates.clear();  // none runs here: refused from now on
    return plan.settled;
  }
  GPT2_CUBLAS_CHECK(launch(plan.candidates[plan.chosen]));
  return true;
}

void matmul_fp8(__nv_bfloat16* out, const Fp8Operand& a, const Fp8Operand& b,
                const __nv_bfloat16* bias, int M, int N, int K, const Context& ctx,
                bool accumulate) {
  Fp8Epilogue epilogue;
  epilogue.bias = bias;
  epilogue.accumulate = accumulate;
  matmul_fp8(out, a, b, M, N, K, epilogue, ctx);
}

void matmul_fp8(__nv_bfloat16* out, const Fp8Operand& a, const Fp8Operand& b, int M, int N,
                int K, const Fp8Epilogue& epilogue, const Context& ctx) {
  if (!try_matmul_fp8(out, a, b, M, N, K, epilogue, ctx))
    GPT2_FAIL("cuBLASLt has no FP8 GEMM that runs for M=", M, " N=", N, " K=", K, " (",
              cpu::to_string(a.format), " x ", cpu::to_string(b.format),
              ") on this GPU: FP8 tensor cores need sm_89 or newer");
}

}  // namespace gpt2::gpu
