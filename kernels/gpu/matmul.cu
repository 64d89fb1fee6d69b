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
 * cuBLASLt: the algorithm comes from its heuristic (first result) for the shape, the pointers'
 * alignment and the Context's workspace; split-K is allowed only with fp32 partials.
 */
#include "kernels/gpu/matmul.cuh"

#include <climits>

#include "base/error.h"
#include "kernels/gpu/common.cuh"
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

/// Largest power of two (up to 256) dividing the address: what cuBLASLt may assume.
uint32_t alignment_bytes(const void* ptr) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

/// Owns the cuBLASLt descriptors of one call (destroyed also when a check throws).
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtDescriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <typename Value>
void set_desc(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attribute,
              const Value& value) {
  GPT2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof(value)));
}

void set_preference(cublasLtMatmulPreference_t preference,
                    cublasLtMatmulPreferenceAttributes_t attribute, uint32_t value) {
  GPT2_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
}

/// Runs g through cuBLASLt; false (nothing launched) when cuBLASLt offers no algorithm.
bool gemm_cublaslt(const Context& ctx, const Gemm& g) {
  LtDescriptors desc;
  GPT2_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  if (g.gelu_aux) {
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
             g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX);
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.gelu_aux);
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(g.ldd));
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, g.type);
  } else if (g.dgelu_aux) {
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU);
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.dgelu_aux);
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(g.ldd));
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, g.type);
  } else if (g.bias) {
    set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  }
  if (g.bias) set_desc(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  // Stored shapes (before op): A is k x m when transposed, else m x k; B likewise.
  GPT2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, g.type, g.trans_a ? g.k : g.m,
                                               g.trans_a ? g.m : g.k, g.lda));
  GPT2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, g.type, g.trans_b ? g.n : g.k,
                                               g.trans_b ? g.k : g.n, g.ldb));
  GPT2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, g.type, g.m, g.n, g.ldd));

  GPT2_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.preference));
  const size_t workspace_bytes = ctx.lt_workspace_bytes();
  GPT2_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      desc.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
      sizeof(workspace_bytes)));
  set_preference(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_bytes(g.a));
  set_preference(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_bytes(g.b));
  set_preference(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_bytes(g.d));
  set_preference(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_bytes(g.d));
  // Split-K only with fp32 partials in the workspace (COMPUTE_TYPE): the in-place and
  // output-type schemes add the partial products up in bf16, one rounding per split.
  set_preference(desc.preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                 CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);

  cublasLtMatmulHeuristicResult_t heuristic{};
  int num_results = 0;
  const cublasStatus_t found = cublasLtMatmulAlgoGetHeuristic(
      ctx.cublaslt(), desc.op, desc.a, desc.b, desc.d, desc.d, desc.preference, 1, &heuristic,
      &num_results);
  if (found != CUBLAS_STATUS_SUCCESS || num_results == 0) return false;

  const float alpha = 1.0f;
  const cublasStatus_t status =
      cublasLtMatmul(ctx.cublaslt(), desc.op, &alpha, g.a, desc.a, g.b, desc.b, &g.beta, g.d,
                     desc.d, g.d, desc.d, &heuristic.algo, ctx.lt_workspace(), workspace_bytes,
                     ctx.stream());
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

/// dweight += dout^T @ inp; dbias += column sums of dout (when dbias is set).
template <typename T_>
void parameter_gradients(T_* dweight, T_* dbias, const T_* dout, const T_* inp, int BT, int C,
                         int OC, float* dbias_scratch, const Context& ctx) {
  {
    const Gemm g{kCudaDataType<T_>, false, true, C, OC, BT, inp, C, dout, OC,
                 dweight, C, /*beta=*/1.0f, nullptr};
    if (!(ctx.use_cublaslt() && gemm_cublaslt(ctx, g))) gemm_cublas(ctx, g);
  }
  if (dbias) {
    const int64_t chunks = ceil_div(BT, kColumnSumRowsPerChunk);
    GPT2_CHECK(chunks <= 65535, "B*T = ", BT, " exceeds the column-sum grid");
    launch_column_partial_sums(dbias_scratch, dout, BT, OC, ctx.stream());
    launch_add_column_partials(dbias, dbias_scratch, chunks, OC, ctx.stream());
  }
}

}  // namespace

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
template void matmul_backward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*,
                                             const __nv_bfloat16*, const __nv_bfloat16*,
                                             const __nv_bfloat16*, int, int, int, int, float*,
                                             const Context&);

}  // namespace gpt2::gpu
