/**
 * @file model.cpp
 * @brief Names of the model enums, and the CUDA entry points of a build without CUDA.
 *
 * When the CUDA backend is compiled (GPT2_WITH_CUDA_BACKEND, set by model/CMakeLists.txt when
 * a CUDA compiler was found), make_cuda_model and cuda_backend_available live in the CUDA
 * model's source; otherwise the definitions here say why no CUDA backend exists, so the
 * trainer can print that reason for --device cuda instead of failing to link.
 */
#include "model/model.h"

#include "base/error.h"
#include "model/cpu_model.h"
#ifdef GPT2_WITH_CUDA_BACKEND
#include "model/cuda_model.h"
#endif

namespace gpt2 {

const char* to_string(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kNaive: return "naive";
    case AttentionKind::kFlash: return "flash";
  }
  return "unknown";
}

const char* to_string(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
  }
  return "unknown";
}

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
  }
  return "unknown";
}

MemoryPlan plan_model_memory(const ModelOptions& options, DeviceKind device) {
  if (device == DeviceKind::kCpu) return plan_cpu_model_memory(options);
#ifdef GPT2_WITH_CUDA_BACKEND
  return plan_cuda_model_memory(options);
#else
  GPT2_FAIL("this build has no CUDA backend (no CUDA compiler was found at configure time)");
#endif
}

#ifndef GPT2_WITH_CUDA_BACKEND

namespace {
constexpr const char* kNoCudaReason =
    "this build has no CUDA backend (no CUDA compiler was found at configure time)";
}  // namespace

std::unique_ptr<Model> make_cuda_model(const ModelOptions&) { GPT2_FAIL(kNoCudaReason); }

bool cuda_backend_available(std::string* why_not) {
  if (why_not) *why_not = kNoCudaReason;
  return false;
}

void select_gpu_of_local_rank(int) {}

#endif  // GPT2_WITH_CUDA_BACKEND

}  // namespace gpt2
