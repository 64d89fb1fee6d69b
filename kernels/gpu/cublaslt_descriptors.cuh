/**
 * @file cublaslt_descriptors.cuh
 * @brief What the cuBLASLt GEMMs (matmul.cu, matmul_fp8.cu) share: descriptors owned for a
 *        shape's lifetime, attribute setters that check, preferences, the epilogue choice and
 *        the plan keys' hash. Internal to kernels/gpu.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include <cublasLt.h>

#include "base/error.h"
#include "kernels/gpu/common.cuh"
#include "kernels/gpu/context.cuh"

namespace gpt2::gpu {

/// The epilogue of a GEMM with (or without) a bias and a GELU (aux output: the pre-GELU values)
/// or DGELU (aux input) step.
inline cublasLtEpilogue_t epilogue_for(bool bias, bool gelu_aux, bool dgelu_aux) {
  if (gelu_aux) return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (dgelu_aux) return CUBLASLT_EPILOGUE_DGELU;
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

/// A hash of a plan key's fields, for the plan caches' unordered_maps.
inline size_t hash_key_fields(std::initializer_list<int64_t> fields) {
  size_t h = 0;
  for (const int64_t v : fields) h = h * 1000003u ^ std::hash<int64_t>()(v);
  return h;
}

/// Owns the cuBLASLt descriptors of one GEMM shape (destroyed also when a check throws).
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatrixLayout_t c = nullptr;  // when C's type is not D's (FP8 outputs); else d
  cublasLtMatmulPreference_t preference = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (c) cublasLtMatrixLayoutDestroy(c);
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

inline void set_preference(cublasLtMatmulPreference_t preference,
                           cublasLtMatmulPreferenceAttributes_t attribute, uint32_t value) {
  GPT2_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
}

/// desc's preference: the Context's workspace, the operands' alignments (what the heuristic may
/// assume), and split-K only with fp32 partials in the workspace (COMPUTE_TYPE: the in-place
/// and output-type schemes add the partial products up in bf16, one rounding per split).
inline void make_preference(const Context& ctx, LtDescriptors& desc, uint32_t align_a,
                            uint32_t align_b, uint32_t align_d) {
  GPT2_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.preference));
  const size_t workspace_bytes = ctx.lt_workspace_bytes();
  GPT2_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      desc.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
      sizeof(workspace_bytes)));
  set_preference(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
  set_preference(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
  set_preference(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d);
  set_preference(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d);
  set_preference(desc.preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                 CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
}

/// The heuristic's candidate algorithms for desc's shape, D also as C, within desc's
/// preference, best ranked first (at most kCandidateAlgorithms; none when cuBLASLt has none).
constexpr int kCandidateAlgorithms = 8;
inline std::vector<cublasLtMatmulAlgo_t> heuristic_candidates(const Context& ctx,
                                                              const LtDescriptors& desc) {
  cublasLtMatmulHeuristicResult_t results[kCandidateAlgorithms] = {};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      ctx.cublaslt(), desc.op, desc.a, desc.b, desc.d, desc.d, desc.preference,
      kCandidateAlgorithms, results, &found);
  std::vector<cublasLtMatmulAlgo_t> candidates;
  if (status == CUBLAS_STATUS_SUCCESS)
    for (int i = 0; i < found; ++i) candidates.push_back(results[i].algo);
  return candidates;
}

}  // namespace gpt2::gpu
