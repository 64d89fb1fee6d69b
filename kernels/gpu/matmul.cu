/**
 * @file matmul.cu
 * @brief Dense layer forward/backward through cuBLASLt (or cublasGemmEx); see matmul.cuh.
 *
 * Row-major to column-major: cuBLAS is column-major, and a row-major (R, K) matrix with leading
 * dimension K is, byte for byte, the column-major (K, R) matrix: its transpose. Write Wc, Xc,
 * Yc for the column-major views of weight (C x OC), inp (C x BT) and out (OC x BT); then
 *   forward  Y = X W^T     <=>  Yc  = Wc^T Xc      m = OC, n = BT, k = C   A=weight (T), B=inp (N)
 *   dinp     dX = dY W     <=>  dXc = Wc dYc       m = C,  n = BT, k = OC  A=weight (N), B=dout (N)
 *   dweight  dW = dY^T X   <=>  dWc = Xc dYc^T     m = C,  n = OC, k = BT  A=inp (N), B=dout (T)
 * with leading dimensions lda = ldb = the row length of the stored row-major matrix, and
 * ldd = the row length of the output. The bias epilogue adds a length-m vector to every
 * column of D: m = OC is exactly out's per-row bias.
 * matmul_forward_gelu uses the GELU_AUX(_BIAS) epilogue: D gets gelu(result) and the aux
 * matrix (same layout and type as D) the result itself; matmul_backward_gelu the DGELU
 * epilogue on the dinp GEMM: D = gelu'(aux) * result, aux = the forward's pre-GELU values.
 * cuBLASLt: the candidate algorithms come from its heuristic for the shape, the pointers'
 * alignment and the Context's workspace (split-K only with fp32 partials), and the shape's
 * first call picks one with choose_algorithm (cublaslt_tuning.cuh: the fastest of those whose
 * outputs are bitwise the first runnable one's). The descriptors and the algorithm are made
 * once per shape and kept in the Context: the heuristic costs host time (tens of
 * microseconds) that a training step paid ~150 times.
 */
#include "kernels/gpu/matmul.cuh"

#include <climits>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "kernels/gpu/common.cuh"
#include "kernels/gpu/cublaslt_descriptors.cuh"
#include "kernels/gpu/cublaslt_tuning.cuh"
#include "kernels/gpu/gelu.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kThreads = 256;

template <typename T_>
constexpr cudaDataType_t kCudaDataType = CUDA_R_32F;
template <>
constexpr cudaDataType_t kCudaDataType<__nv_bfloat16> = CUDA_R_16BF;

/// D (m x n, column-major, ldd) = op(A) op(B) + beta D [+ bias broadcast over columns].
struct Gemm {
  cudaDataType_t type;
  bool trans_a, trans_b;
  int m, n, k;
  const void* a;
  int lda;
  const void* b;
  int ldb;
  void* d;
  int ldd;
  float beta;
  const void* bias;  // length m, or nullptr
  void* gelu_aux = nullptr;  // when set: D = gelu(result), gelu_aux = result (same layout as D)
  const void* dgelu_aux = nullptr;  // when set: D = gelu'(dgelu_aux) * result (same layout)
};

/// What decides a GEMM's descriptors and algorithm: everything but the data pointers (and
/// beta, which cuBLASLt takes per call).
struct GemmKey {
  cudaDataType_t type;
  bool trans_a, trans_b;
  int m, n, k, lda, ldb, ldd;
  cublasLtEpilogue_t epilogue;
  uint32_t align_a, align_b, align_d;
  bool operator==(const GemmKey& o) const {
    return type == o.type && trans_a == o.trans_a && trans_b == o.trans_b && m == o.m &&
           n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldd == o.ldd &&
           epilogue == o.epilogue && align_a == o.align_a && align_b == o.align_b &&
           align_d == o.align_d;
  }
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& key) const {
    return hash_key_fields({int64_t(key.type), int64_t(key.trans_a), int64_t(key.trans_b),
                            int64_t(key.m), int64_t(key.n), int64_t(key.k), int64_t(key.lda),
                            int64_t(key.ldb), int64_t(key.ldd), int64_t(key.epilogue),
                            int64_t(key.align_a), int64_t(key.align_b), int64_t(key.align_d)});
  }
};

/// One shape's descriptors, the heuristic's candidates (none: no cuBLASLt path) and the one
/// chosen on the shape's first call (choose_algorithm), kept for the Context's lifetime: the
/// heuristic runs once per shape, and every call of a shape gets the same algorithm.
struct LtPlan {
  LtDescriptors desc;
  std::vector<cublasLtMatmulAlgo_t> candidates;
  size_t chosen = 0;
  bool settled = false;
};

struct LtPlanCache {
  std::unordered_map<GemmKey, std::unique_ptr<LtPlan>, GemmKeyHash> plans;
};

cublasLtEpilogue_t epilogue_of(const Gemm& g) {
  return epilogue_for(g.bias != nullptr, g.gelu_aux != nullptr, g.dgelu_aux != nullptr);
}

/// The bias and aux pointers of one call on a shape's descriptor.
void set_call_pointers(cublasLtMatmulDesc_t op, const Gemm& g) {
  if (g.bias) set_desc(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (g.gelu_aux) set_desc(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.gelu_aux);
  if (g.dgelu_aux) set_desc(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.dgelu_aux);
}

/// The descriptors and algorithm for g's shape, made by the heuristic on first use.
LtPlan& lt_plan(const Context& ctx, const Gemm& g, cublasLtEpilogue_t epilogue) {
  std::shared_ptr<void>& slot = ctx.matmul_plans();
  if (!slot) slot = std::make_shared<LtPlanCache>();
  LtPlanCache& cache = *static_cast<LtPlanCache*>(slot.get());
  const GemmKey key{g.type, g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldd, epilogue,
                    alignment_bytes(g.a), alignment_bytes(g.b), alignment_bytes(g.d)};
  std::unique_ptr<LtPlan>& entry = cache.plans[key];
  if (entry) return *entry;
  auto plan = std::make_unique<LtPlan>();
  LtDescriptors& desc = plan->desc;
  GPT2_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  if (g.gelu_aux || g.dgelu_aux) {
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(g.ldd));
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, g.type);
  }
  set_call_pointers(desc.op, g);  // the heuristic sees a call's pointers, as it always did
  // Stored shapes (before op): A is k x m when transposed, else m x k; B likewise.
  GPT2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, g.type, g.trans_a ? g.k : g.m,
                                               g.trans_a ? g.m : g.k, g.lda));
  GPT2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, g.type, g.trans_b ? g.n : g.k,
                                               g.trans_b ? g.k : g.n, g.ldb));
  GPT2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, g.type, g.m, g.n, g.ldd));
  make_preference(ctx, desc, key.align_a, key.align_b, key.align_d);
  plan->candidates = heuristic_candidates(ctx, desc);
  entry = std::move(plan);
  return *entry;
}

/// Bytes of a column-major (rows, cols) matrix with leading dimension ld, first to last element.
size_t matrix_bytes(cudaDataType_t type, int rows, int cols, int ld) {
  const size_t element = type == CUDA_R_16BF ? 2 : 4;
  return (static_cast<size_t>(ld) * (cols - 1) + rows) * element;
}

/// Runs g through cuBLASLt; false (nothing launched) when cuBLASLt offers no algorithm.
bool gemm_cublaslt(const Context& ctx, const Gemm& g) {
  LtPlan& plan = lt_plan(ctx, g, epilogue_of(g));
  if (plan.candidates.empty()) return false;
  set_call_pointers(plan.desc.op, g);  // the shape's descriptor takes this call's pointers
  const float alpha = 1.0f;
  auto launch = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(ctx.cublaslt(), plan.desc.op, &alpha, g.a, plan.desc.a, g.b,
                          plan.desc.b, &g.beta, g.d, plan.desc.d, g.d, plan.desc.d, &algo,
                          ctx.lt_workspace(), ctx.lt_workspace_bytes(), ctx.stream());
  };
  if (!plan.settled) {
    const size_t d_bytes = matrix_bytes(g.type, g.m, g.n, g.ldd);
    GemmTrial trial{launch, {{g.d, d_bytes}}};
    if (g.gelu_aux) trial.outputs.push_back({g.gelu_aux, d_bytes});
    trial.repeatable = g.dgelu_aux != g.d;
    if (g.beta != 0.0f) {
      trial.accumulated = g.d;
      trial.accumulated_bytes = d_bytes;
    }
    plan.chosen = choose_algorithm(ctx, plan.candidates, trial);
    plan.settled = plan.chosen < plan.candidates.size();
    if (!plan.settled) plan.candidates.clear();  // none runs: cublasGemmEx from now on
    return plan.settled;
  }
  const cublasStatus_t status = launch(plan.candidates[plan.chosen]);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  GPT2_CUBLAS_CHECK(status);
  return true;
}

/// Runs g (without its bias) through cublasGemmEx, fp32 accumulation.
void gemm_cublas(const Context& ctx, const Gemm& g) {
  const float alpha = 1.0f;
  GPT2_CUBLAS_CHECK(cublasGemmEx(ctx.cublas(), g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k, &alpha,
                                 g.a, g.type, g.lda, g.b, g.type, g.ldb, &g.beta, g.d, g.type,
                                 g.ldd, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/// out[row, o] += bias[o] over rows x OC elements (the fallback path's bias).
template <typename T_>
__global__ void add_bias_kernel(T_* out, const T_* bias, int64_t num_elements, int OC) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_elements) return;
  out[i] = from_float<T_>(to_float(out[i]) + to_float(bias[i % OC]));
}

void check_shapes(int B, int T, int C, int OC) {
  GPT2_CHECK(B >= 1 && T >= 1 && C >= 1 && OC >= 1, "B=", B, " T=", T, " C=", C, " OC=", OC);
  GPT2_CHECK(static_cast<int64_t>(B) * T <= INT_MAX, "B*T = ", static_cast<int64_t>(B) * T,
             " exceeds cuBLAS's int dimensions");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

template <typename T_>
void matmul_forward(T_* out, const T_* inp, const T_* weight, const T_* bias, int B, int T, int C,
                    int OC, const Context& ctx) {
  check_shapes(B, T, C, OC);
  GPT2_CHECK(out != nullptr && inp != nullptr && weight != nullptr);
  const int BT = B * T;
  Gemm g{kCudaDataType<T_>, /*trans_a=*/true, /*trans_b=*/false, OC, BT, C, weight, C, inp, C,
         out, OC, /*beta=*/0.0f, bias};
  const bool bias_in_epilogue = bias == nullptr || is_aligned16(bias);
  if (!bias_in_epilogue) g.bias = nullptr;
  if (ctx.use_cublaslt() && gemm_cublaslt(ctx, g)) {
    if (bias_in_epilogue) return;
  } else {
    gemm_cublas(ctx, g);
  }
  if (bias) {
    const int64_t num_elements = static_cast<int64_t>(BT) * OC;
    add_bias_kernel<<<grid_size(num_elements, kThreads), kThreads, 0, ctx.stream()>>>(
        out, bias, num_elements, OC);
    GPT2_CUDA_CHECK_LAUNCH();
  }
}

template <typename T_>
void matmul_forward_gelu(T_* out_gelu, T_* pre_gelu, const T_* inp, const T_* weight,
                         const T_* bias, int B, int T, int C, int OC, const Context& ctx) {
  check_shapes(B, T, C, OC);
  GPT2_CHECK(out_gelu != nullptr && pre_gelu != nullptr && inp != nullptr && weight != nullptr);
  const int BT = B * T;
  // The epilogue writes aux with the output's layout; it needs 16-byte aligned aux and bias.
  const bool fusable = (bias == nullptr || is_aligned16(bias)) && is_aligned16(pre_gelu) &&
                       is_aligned16(out_gelu);
  if (ctx.use_cublaslt() && fusable) {
    Gemm g{kCudaDataType<T_>, /*trans_a=*/true, /*trans_b=*/false, OC, BT, C, weight, C, inp, C,
           out_gelu, OC, /*beta=*/0.0f, bias, pre_gelu};
    if (gemm_cublaslt(ctx, g)) return;
  }
  matmul_forward(pre_gelu, inp, weight, bias, B, T, C, OC, ctx);
  gelu_forward(out_gelu, pre_gelu, static_cast<int64_t>(BT) * OC, ctx.stream());
}

int64_t matmul_backward_scratch_floats(int B, int T, int OC) {
  return column_sum_scratch_floats(static_cast<int64_t>(B) * T, OC);
}

namespace {

/// dinp = dout @ weight (m = C, n = BT, k = OC), or with dgelu_aux the DGELU epilogue's
/// gelu'(dgelu_aux) * (dout @ weight); false when cuBLASLt has no algorithm for the latter.
template <typename T_>
bool input_gradient(T_* dinp, const T_* dout, const T_* weight, const T_* dgelu_aux, int BT,
                    int C, int OC, const Context& ctx) {
  Gemm g{kCudaDataType<T_>, false, false, C, BT, OC, weight, C, dout, OC,
         dinp, C, /*beta=*/0.0f, nullptr};
  g.dgelu_aux = dgelu_aux;
  if (ctx.use_cublaslt() && gemm_cublaslt(ctx, g)) return true;
  if (dgelu_aux) return false;
  gemm_cublas(ctx, g);
  return true;
}

/// dbias += column sums of dout (BT, OC): two passes, no atomics.
template <typename T_>
void bias_gradient(T_* dbias, const T_* dout, int BT, int OC, float* dbias_scratch,
                   const Context& ctx) {
  const int64_t chunks = ceil_div(BT, kColumnSumRowsPerChunk);
  GPT2_CHECK(chunks <= 65535, "B*T = ", BT, " exceeds the column-sum grid");
  launch_column_partial_sums(dbias_scratch, dout, BT, OC, ctx.stream());
  launch_add_column_partials(dbias, dbias_scratch, chunks, OC, ctx.stream());
}

/// dweight += dout^T @ inp; dbias += column sums of dout (when dbias is set).
template <typename T_>
void parameter_gradients(T_* dweight, T_* dbias, const T_* dout, const T_* inp, int BT, int C,
                         int OC, float* dbias_scratch, const Context& ctx) {
  {
    const Gemm g{kCudaDataType<T_>, false, true, C, OC, BT, inp, C, dout, OC,
                 dweight, C, /*beta=*/1.0f, nullptr};
    if (!(ctx.use_cublaslt() && gemm_cublaslt(ctx, g))) gemm_cublas(ctx, g);
  }
  if (dbias) bias_gradient(dbias, dout, BT, OC, dbias_scratch, ctx);
}

}  // namespace

template <typename T_>
void matmul_bias_backward(T_* dbias, const T_* dout, int B, int T, int OC, float* dbias_scratch,
                          const Context& ctx) {
  check_shapes(B, T, 1, OC);
  GPT2_CHECK(dbias != nullptr && dout != nullptr && dbias_scratch != nullptr);
  bias_gradient(dbias, dout, B * T, OC, dbias_scratch, ctx);
}

template <typename T_>
void matmul_backward(T_* dinp, T_* dweight, T_* dbias, const T_* dout, const T_* inp,
                     const T_* weight, int B, int T, int C, int OC, float* dbias_scratch,
                     const Context& ctx) {
  check_shapes(B, T, C, OC);
  GPT2_CHECK(dweight != nullptr && dout != nullptr && inp != nullptr && weight != nullptr);
  GPT2_CHECK(dbias == nullptr || dbias_scratch != nullptr, "dbias needs dbias_scratch");
  const int BT = B * T;
  if (dinp) input_gradient<T_>(dinp, dout, weight, nullptr, BT, C, OC, ctx);
  parameter_gradients(dweight, dbias, dout, inp, BT, C, OC, dbias_scratch, ctx);
}

template <typename T_>
void matmul_backward_gelu(T_* dpre_gelu, T_* dweight, T_* dbias, const T_* dout,
                          const T_* gelu_out, const T_* pre_gelu, const T_* weight, int B, int T,
                          int C, int OC, float* dbias_scratch, const Context& ctx) {
  check_shapes(B, T, C, OC);
  GPT2_CHECK(dpre_gelu != nullptr && dweight != nullptr && dout != nullptr &&
             gelu_out != nullptr && pre_gelu != nullptr && weight != nullptr);
  GPT2_CHECK(dbias == nullptr || dbias_scratch != nullptr, "dbias needs dbias_scratch");
  const int BT = B * T;
  // The epilogue reads the aux matrix with dpre_gelu's layout; it needs both 16-byte aligned.
  const bool fusable = is_aligned16(dpre_gelu) && is_aligned16(pre_gelu);
  if (!(fusable && input_gradient(dpre_gelu, dout, weight, pre_gelu, BT, C, OC, ctx))) {
    input_gradient<T_>(dpre_gelu, dout, weight, nullptr, BT, C, OC, ctx);
    gelu_backward(dpre_gelu, pre_gelu, dpre_gelu, static_cast<int64_t>(BT) * C, ctx.stream());
  }
  parameter_gradients(dweight, dbias, dout, gelu_out, BT, C, OC, dbias_scratch, ctx);
}

template void matmul_forward_gelu<float>(float*, float*, const float*, const float*,
                                         const float*, int, int, int, int, const Context&);
template void matmul_forward_gelu<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*,
                                                 const __nv_bfloat16*, const __nv_bfloat16*,
                                                 const __nv_bfloat16*, int, int, int, int,
                                                 const Context&);
template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int,
                                    int, int, const Context&);
template void matmul_forward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                            const __nv_bfloat16*, const __nv_bfloat16*, int, int,
                                            int, int, const Context&);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int, int, int, int, float*, const Context&);
template void matmul_backward_gelu<float>(float*, float*, float*, const float*, const float*,
                                          const float*, const float*, int, int, int, int, float*,
                                          const Context&);
template void matmul_backward_gelu<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*,
                                                  __nv_bfloat16*, const __nv_bfloat16*,
                                                  const __nv_bfloat16*, const __nv_bfloat16*,
                                                  const __nv_bfloat16*, int, int, int, int,
                                                  float*, const Context&);
template void matmul_bias_backward<float>(float*, const float*, int, int, int, float*,
                                          const Context&);
template void matmul_bias_backward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int, int,
                                                  int, float*, const Context&);
template void matmul_backward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*,
                                             const __nv_bfloat16*, const __nv_bfloat16*,
                                             const __nv_bfloat16*, int, int, int, int, float*,
                                             const Context&);

}  // namespace gpt2::gpu
