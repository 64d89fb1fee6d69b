/**
 * @file model.h
 * @brief The backend interface of a GPT-2 model: one implementation per device.
 *
 * A Model owns parameters (with fp32 master copies), gradients, AdamW moments and the
 * activations for micro-batches of shape (B, T) fixed at construction. The trainer drives it:
 *   zero_grad(); for each micro-batch: forward_backward(); grad_norm(); adamw_step().
 * Parameters cross the interface as fp32 in ParameterLayout order (checkpoints, tests).
 * Losses are the mean over the B*T positions of the micro-batch.
 */
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kernels/common/attention_kind.h"
#include "kernels/cpu/adamw.h"
#include "model/config.h"
#include "model/memory_plan.h"

namespace gpt2 {

enum class DeviceKind { kCpu, kCuda };
enum class Precision { kFp32, kBf16 };

const char* to_string(AttentionKind kind);   // "naive" | "flash"
const char* to_string(DeviceKind kind);      // "cpu" | "cuda"
const char* to_string(Precision precision);  // "fp32" | "bf16"

struct ModelOptions {
  ModelConfig config;
  int batch_size = 1;  // B of every micro-batch
  int seq_len = 1;     // T of every micro-batch, <= config.max_seq_len
  AttentionKind attention = AttentionKind::kFlash;
  Precision precision = Precision::kFp32;
  FlashKernelChoice flash_kernel = FlashKernelChoice::kAuto;  // GPU only
  bool deterministic_attention = false;  // GPU flash backward bit-identical run to run (slower)
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelOptions& options() const = 0;
  virtual DeviceKind device() const = 0;
  virtual std::string device_name() const = 0;  // "CPU (2 threads)", "NVIDIA H100 80GB HBM3"
  /// The attention kernel in use: "naive", "flash" (CPU), "flash-portable", "flash-hopper"...
  virtual std::string attention_kernel() const = 0;

  /// fp32 parameters in ParameterLayout order (ParameterLayout::total floats).
  virtual void set_parameters(const float* params) = 0;
  virtual void get_parameters(float* params) const = 0;

  virtual void zero_grad() = 0;
  /// One micro-batch, inputs/targets (B,T). Parameter gradients are accumulated (+=) with the
  /// gradient of loss_scale * mean_bt(loss[b,t]); with loss_scale = 1/grad_accum_steps the sum
  /// over micro-batches is the gradient of the mean loss. Returns mean_bt(loss).
  virtual float forward_backward(const int* inputs, const int* targets, float loss_scale) = 0;
  /// Forward only (validation): mean loss over (B,T); gradients untouched.
  virtual float evaluate(const int* inputs, const int* targets) = 0;
  /// Next-token distribution after tokens[0..length): writes V probabilities.
  /// 1 <= length <= seq_len. Gradients untouched; activations may be overwritten.
  virtual void next_token_probs(const int* tokens, int length, float* probs) = 0;

  /// Global L2 norm of the accumulated parameter gradients.
  virtual float grad_norm() = 0;
  /// AdamW on every tensor (weight decay on the 2-D weights only); grads scaled by grad_scale
  /// first (clipping). step is 1-based.
  virtual void adamw_step(const cpu::AdamWHyper& hyper, int step, float grad_scale) = 0;

  virtual void get_optimizer_state(float* m, float* v) const = 0;
  virtual void set_optimizer_state(const float* m, const float* v) = 0;

  /// The plan this model allocated by.
  virtual const MemoryPlan& memory_plan() const = 0;
  /// Measured high-water mark of memory on the model's device, in bytes (CPU: process max RSS;
  /// CUDA: device memory in use at its peak, measured).
  virtual size_t peak_memory_bytes() const = 0;
};

/// The plan the backend for `device` would allocate by, computed without allocating (validates
/// the options like the backend's constructor). Throws gpt2::Error for cuda in a build without
/// the CUDA backend.
MemoryPlan plan_model_memory(const ModelOptions& options, DeviceKind device);

/// CPU backend (always available).
std::unique_ptr<Model> make_cpu_model(const ModelOptions& options);
/// CUDA backend; throws gpt2::Error when not built or no GPU is present.
std::unique_ptr<Model> make_cuda_model(const ModelOptions& options);
/// True when the CUDA backend is compiled in and a CUDA device is visible.
bool cuda_backend_available(std::string* why_not = nullptr);

}  // namespace gpt2
