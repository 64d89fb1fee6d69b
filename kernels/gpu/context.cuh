/**
 * @file context.cuh
 * @brief The per-device state the CUDA ops share: a stream, cuBLAS and cuBLASLt handles and
 *        the cuBLASLt workspace; plus the "is there a usable GPU" probe.
 *
 * Every op launcher takes the stream (elementwise and reduction ops) or the Context (ops that
 * call cuBLAS) last. The Context's stream is an ordinary (blocking) stream, so plain cudaMemcpy
 * on the legacy default stream still orders correctly with it. The cuBLAS handle is bound to
 * the stream with the default math mode (no TF32: fp32 GEMMs are exact fp32). The cuBLASLt
 * workspace is allocated once here (kDefaultLtWorkspaceBytes unless told otherwise); a model
 * lists it in its memory plan under "workspace".
 * Host-only declarations: includable from .cpp files.
 */
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace gpt2::gpu {

/// True when a CUDA device is visible and can run this build's kernels; otherwise false with
/// the reason in *why (when given). Never throws.
bool gpu_available(std::string* why = nullptr);

/// Name of CUDA device `device` (e.g. "NVIDIA H100 80GB HBM3"); throws gpt2::Error on failure.
std::string gpu_device_name(int device);

class Context {
 public:
  static constexpr size_t kDefaultLtWorkspaceBytes = size_t(32) << 20;  // cuBLAS's H100 advice

  /// Uses the current CUDA device. Throws gpt2::Error when CUDA, cuBLAS or the allocation fail.
  explicit Context(size_t lt_workspace_bytes = kDefaultLtWorkspaceBytes);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }
  void* lt_workspace() const { return lt_workspace_; }
  size_t lt_workspace_bytes() const { return lt_workspace_bytes_; }
  int device() const { return device_; }
  const std::string& device_name() const { return device_name_; }

  /// Matmuls use cuBLASLt (bias fused in its epilogue) when true, the default; when false, or
  /// when cuBLASLt offers no algorithm for a shape/alignment, they use cublasGemmEx and a
  /// separate bias kernel. Tests flip it to cover both paths.
  bool use_cublaslt() const { return use_cublaslt_; }
  void set_use_cublaslt(bool use) { use_cublaslt_ = use; }

  /// cuBLASLt GEMMs choose each shape's algorithm by timing the heuristic's candidates whose
  /// outputs are bitwise its first choice's (cublaslt_tuning.cuh) when true, the default; when
  /// false they keep the first choice. The environment's GPT2_GEMM_TUNING=off (or 0) makes it
  /// false at construction; any value but on, off, 1 or 0 is an error there.
  bool gemm_tuning() const { return gemm_tuning_; }
  void set_gemm_tuning(bool tune) { gemm_tuning_ = tune; }

  /// Blocks until all work queued on the stream is done (throws on an asynchronous error).
  void synchronize() const;

  /// matmul.cu's cuBLASLt descriptors and algorithm per GEMM shape, chosen once: made by
  /// matmul.cu on first use (opaque here), freed with the Context.
  std::shared_ptr<void>& matmul_plans() const { return matmul_plans_; }
  /// The same for matmul_fp8.cu's FP8 GEMMs.
  std::shared_ptr<void>& fp8_matmul_plans() const { return fp8_matmul_plans_; }

 private:
  void release() noexcept;  // frees what exists; used by the destructor and a failed constructor

  int device_ = 0;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  void* lt_workspace_ = nullptr;
  size_t lt_workspace_bytes_ = 0;
  bool use_cublaslt_ = true;
  bool gemm_tuning_ = true;
  mutable std::shared_ptr<void> matmul_plans_;
  mutable std::shared_ptr<void> fp8_matmul_plans_;
};

}  // namespace gpt2::gpu
