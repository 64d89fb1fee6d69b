/**
 * @file cuda_model.h
 * @brief The CUDA GPT-2 backend (bf16 mixed precision or exact fp32), host-only declarations.
 *
 * Same structure as the CPU model (cpu_model.h) over the ops of kernels/gpu: activations,
 * weights and gradients in the storage type (bf16 or fp32), fp32 accumulation everywhere,
 * fp32 master weights (bf16 only) and fp32 AdamW moments. Attention naive or flash at
 * construction. The memory plan is built and checked against the device's free memory before
 * anything is allocated; each buffer is then allocated by its plan item, and an allocation that
 * fails names the buffer, the bytes it needed and the bytes free. Peak memory is measured:
 * the device's used memory (cudaMemGetInfo) sampled after allocation and after every call that
 * synchronizes (each forward_backward / evaluate / prefill / decode_step / adamw_step).
 * The classifier works on chunks of rows, so the (B,T,Vp) logits are never held at once.
 * Generation keeps a GPU key/value cache (in activation buffers a session overwrites anyway):
 * prefill is one forward over the prompt, and a decode step costs one position's forward.
 */
#pragma once

#include <cstddef>
#include <memory>

#include "model/model.h"

namespace gpt2 {

/// The CUDA model's plan for these options (no device needed). Validates the options.
MemoryPlan plan_cuda_model_memory(const ModelOptions& options);

/// The classifier's logits are held for this many bytes' worth of rows by default.
constexpr size_t kClassifierChunkBytes = size_t{256} << 20;
/// Rows of (B*T) whose logits the classifier holds at once: options.classifier_chunk_rows, or
/// when 0 the largest power of two of rows of (Vp) logits within kClassifierChunkBytes, or
/// the rows (a multiple of 128) that fit in the layers' backward workspace (B,T,10C) when that
/// is more (training: the chunk shares that buffer); then clamped to [batch_size, B*T]
/// (generation puts batch_size rows of logits in that buffer).
int classifier_chunk_rows(const ModelOptions& options);

/// Model plus what tests need beyond the trainer's interface.
class CudaModelBase : public Model {
 public:
  /// fp32 copies of the accumulated parameter gradients in ParameterLayout order.
  virtual void get_gradients(float* grads) const = 0;
  /// The per-position losses of the last forward (B*T floats).
  virtual void get_losses(float* losses) const = 0;
  /// After a backward: the gradient of the loss w.r.t. the embedding output (B,T,C), i.e. the
  /// residual-stream gradient buffer. An activation gradient: overwritten by every backward.
  virtual void get_residual_gradient(float* dresidual) const = 0;
};

}  // namespace gpt2
