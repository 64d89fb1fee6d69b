/**
 * @file model.cpp
 * @brief Names of the model enums, the host-side default of a training step's end
 *        (Model::finish_step), and the CUDA entry points of a build without CUDA.
 *
 * When the CUDA backend is compiled (GPT2_WITH_CUDA_BACKEND, set by model/CMakeLists.txt when
 * a CUDA compiler was found), make_cuda_model and cuda_backend_available live in the CUDA
 * model's source; otherwise the definitions here say why no CUDA backend exists, so the
 * trainer can print that reason for --device cuda instead of failing to link.
 */
#include "model/model.h"

#include <cmath>

#include "base/error.h"
#include "model/context_parallel.h"
#include "model/cpu_model.h"
#include "model/parameters.h"
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
    case Precision::kFp8: return "fp8";
  }
  return "unknown";
}

int ModelOptions::local_seq_len() const {
  if (context_size() == 1) return seq_len;
  return context_shard(seq_len, context_size(), context_comm->rank()).local_len();
}

const char* to_string(GradReduce reduce) {
  switch (reduce) {
    case GradReduce::kFp32: return "fp32";
    case GradReduce::kBf16: return "bf16";
  }
  return "unknown";
}

Model::StepOutcome Model::finish_step(const AdamWHyper& hyper, int step, float grad_clip,
                                      int micro_batches) {
  const double local_loss_sum = queued_loss_sum_;
  queued_loss_sum_ = 0.0;
  return finish_step_on_host(hyper, step, grad_clip, micro_batches, local_loss_sum);
}

Model::StepOutcome Model::finish_step_on_host(const AdamWHyper& hyper, int step,
                                              float grad_clip, int micro_batches,
                                              double local_loss_sum) {
  GPT2_CHECK(micro_batches >= 1, micro_batches, " micro-batches");
  Communicator* comm = options().comm;
  const double loss_sum = comm != nullptr && comm->world_size() > 1
                              ? sum_in_rank_order(*comm, local_loss_sum)
                              : local_loss_sum;
  StepOutcome outcome;
  outcome.loss = static_cast<float>(loss_sum / micro_batches);
  outcome.grad_norm = grad_norm();
  // A non-finite loss or norm would write NaN or inf into the parameters: no update. Both are
  // the same on every rank, and so is this decision.
  outcome.applied = std::isfinite(outcome.loss) && std::isfinite(outcome.grad_norm);
  if (outcome.applied) {
    const float grad_scale = (grad_clip > 0.0f && outcome.grad_norm > grad_clip)
                                 ? grad_clip / outcome.grad_norm
                                 : 1.0f;
    adamw_step(hyper, step, grad_scale);
  }
  return outcome;
}

ShardPlan gradient_bucket_plan(const ModelConfig& config, DeviceKind device,
                               size_t bucket_elements, int world_size, int rank) {
  const size_t num_params = ParameterLayout::for_config(config).total;
  if (device == DeviceKind::kCpu)
    return ShardPlan(num_params, world_size, rank,
                     bucket_elements != 0 ? bucket_elements : kDefaultBucketElements);
  return ShardPlan(num_params, world_size, rank,
                   bucket_elements != 0 ? bucket_elements : kDefaultLayerBucketElements,
                   LayerMajorLayout(config).bucket_cuts());
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
