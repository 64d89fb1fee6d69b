/**
 * @file step_scalars.cuh
 * @brief The scalars of a training step kept on the GPU, so that a whole step (micro-batches,
 *        gradient norm, clipping, AdamW) needs one host round trip, at its end. CPU twin: the
 *        host arithmetic of Model::finish_step (model/model.cpp); the two give the same bits.
 *
 * mean_loss_accumulate(scalars, losses, n[, count]): mean = float(S / count), count = n
 *   unless given (context parallelism: a rank's share of the sequences' mean), S the sum of
 *   losses[0..n) in double, added in one fixed tree order (one block), so bitwise deterministic on any GPU;
 *   scalars->last_mean_loss = mean (=), scalars->loss_sum += double(mean).
 * clip_decision(scalars, micro_batches, grad_clip): from scalars->norm_squared (written by
 *   global_norm_squared) and scalars->loss_sum:
 *     norm = float(sqrt(norm_squared));  loss = float(loss_sum / micro_batches)
 *     control.skip = !(isfinite(loss) && isfinite(norm))
 *     control.grad_scale = grad_clip > 0 && norm > grad_clip ? grad_clip / norm : 1
 *   scalars->grad_norm = norm. AdamW reads scalars->control (adamw.cuh).
 * sum_rank_scalars(scalars, gathered, world, sum_norm): data parallel, after every rank's
 *   (loss_sum, norm_squared) pair was gathered into gathered[2r], gathered[2r+1] (rank order):
 *     scalars->loss_sum = 0 + gathered[0] + gathered[2] + ...   (ranks in order, in double)
 *     scalars->norm_squared likewise from the odd slots when sum_norm (ZeRO-1: each rank
 *     squared its own shard), left alone otherwise.
 *   The arithmetic of sum_in_rank_order (parallel/communicator.h), its CPU twin: the same bits.
 * All are single-block launches on `stream`, with no host synchronization (graph-capturable).
 */
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/gpu/adamw.cuh"

namespace gpt2::gpu {

/// One step's scalars in device memory (one struct: one copy brings them all to the host).
struct StepScalars {
  // loss_sum and norm_squared first and together: data parallelism gathers the pair.
  double loss_sum = 0.0;      // the micro-batches' mean losses since the step began
  double norm_squared = 0.0;  // of the accumulated gradients
  float last_mean_loss = 0.0f;
  float grad_norm = 0.0f;
  AdamWDeviceControl control;
  uint32_t fp8_saturated = 0;  // --precision fp8: tensors whose casts saturated (fp8_scale.cuh)
};

void mean_loss_accumulate(StepScalars* scalars, const float* losses, int64_t n,
                          cudaStream_t stream, int64_t count = 0);

void clip_decision(StepScalars* scalars, int micro_batches, float grad_clip, cudaStream_t stream);
void sum_rank_scalars(StepScalars* scalars, const double* gathered, int world, bool sum_norm,
                      cudaStream_t stream);

}  // namespace gpt2::gpu
