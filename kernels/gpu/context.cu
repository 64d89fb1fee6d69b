/**
 * @file context.cu
 * @brief gpu::Context (stream, cuBLAS/cuBLASLt handles, cuBLASLt workspace) and the GPU probe.
 *
 * gpu_available() asks for the device count and then for the attributes of an empty kernel of
 * this build: that fails with "no kernel image" on a GPU whose architecture the build did not
 * target (CMAKE_CUDA_ARCHITECTURES), which is the honest answer to "can the ops run here".
 * The constructor releases whatever it already created when a later step throws.
 */
#include "kernels/gpu/context.cuh"

#include <cstdio>
#include <cstdlib>

#include "base/error.h"

namespace gpt2::gpu {
namespace {

__global__ void probe_kernel() {}

/// GPT2_GEMM_TUNING's value: unset, on or 1 -> true; off or 0 -> false; anything else throws.
bool gemm_tuning_from_environment() {
  const char* value = std::getenv("GPT2_GEMM_TUNING");
  if (value == nullptr) return true;
  const std::string v = value;
  if (v == "on" || v == "1") return true;
  if (v == "off" || v == "0") return false;
  GPT2_FAIL("GPT2_GEMM_TUNING must be on, off, 1 or 0 (got \"", v, "\")");
}

}  // namespace

bool gpu_available(std::string* why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // a non-sticky error: clear it so later CUDA calls start clean
    if (why) *why = str_cat("no usable CUDA driver/device (", cudaGetErrorString(err), ")");
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device visible";
    return false;
  }
  cudaFuncAttributes attributes{};
  err = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why)
      *why = str_cat("this build's kernels cannot run on the visible GPU (",
                     cudaGetErrorString(err), "); check CMAKE_CUDA_ARCHITECTURES");
    return false;
  }
  if (why) why->clear();
  return true;
}

std::string gpu_device_name(int device) {
  cudaDeviceProp properties{};
  GPT2_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

Context::Context(size_t lt_workspace_bytes) : lt_workspace_bytes_(lt_workspace_bytes) {
  gemm_tuning_ = gemm_tuning_from_environment();
  try {
    GPT2_CUDA_CHECK(cudaGetDevice(&device_));
    device_name_ = gpu_device_name(device_);
    GPT2_CUDA_CHECK(cudaStreamCreate(&stream_));
    GPT2_CUBLAS_CHECK(cublasCreate(&cublas_));
    GPT2_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    GPT2_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    GPT2_CUBLAS_CHECK(cublasLtCreate(&cublaslt_));
    if (lt_workspace_bytes_ > 0) GPT2_CUDA_CHECK(cudaMalloc(&lt_workspace_, lt_workspace_bytes_));
  } catch (...) {
    release();
    throw;
  }
}

Context::~Context() { release(); }

void Context::release() noexcept {
  if (lt_workspace_) GPT2_CUDA_CHECK_NOTHROW(cudaFree(lt_workspace_));
  if (cublaslt_) cublasLtDestroy(cublaslt_);
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) GPT2_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_));
  lt_workspace_ = nullptr;
  cublaslt_ = nullptr;
  cublas_ = nullptr;
  stream_ = nullptr;
}

void Context::synchronize() const { GPT2_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace gpt2::gpu
