/**
 * @file step_scalars.cu
 * @brief The step's mean loss and clipping decision on the GPU; see step_scalars.cuh.
 */
#include "kernels/gpu/step_scalars.cuh"

#include "base/error.h"
#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kThreads = 1024;

__global__ void mean_loss_accumulate_kernel(StepScalars* scalars, const float* losses,
                                            int64_t n, int64_t count) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += static_cast<double>(losses[i]);
  sum = block_reduce_sum(sum, scratch);
  if (threadIdx.x == 0) {
    const float mean = static_cast<float>(sum / static_cast<double>(count));
    scalars->last_mean_loss = mean;
    scalars->loss_sum += static_cast<double>(mean);
  }
}

__global__ void clip_decision_kernel(StepScalars* scalars, int micro_batches, float grad_clip) {
  const float norm = static_cast<float>(sqrt(scalars->norm_squared));
  const float loss = static_cast<float>(scalars->loss_sum / static_cast<double>(micro_batches));
  scalars->grad_norm = norm;
  scalars->control.skip = (isfinite(loss) && isfinite(norm)) ? 0 : 1;
  // __fdiv_rn: IEEE round-to-nearest whatever the compiler's division flags, as on the host.
  scalars->control.grad_scale =
      (grad_clip > 0.0f && norm > grad_clip) ? __fdiv_rn(grad_clip, norm) : 1.0f;
}

__global__ void sum_rank_scalars_kernel(StepScalars* scalars, const double* gathered, int world,
                                        bool sum_norm) {
  double loss_sum = 0.0, norm_squared = 0.0;
  for (int r = 0; r < world; ++r) {
    loss_sum += gathered[2 * r];
    norm_squared += gathered[2 * r + 1];
  }
  scalars->loss_sum = loss_sum;
  if (sum_norm) scalars->norm_squared = norm_squared;
}

}  // namespace

void mean_loss_accumulate(StepScalars* scalars, const float* losses, int64_t n,
                          cudaStream_t stream, int64_t count) {
  if (count == 0) count = n;
  GPT2_CHECK(n >= 1 && count >= n, "mean of ", n, " losses over ", count);
  GPT2_CHECK(scalars != nullptr && losses != nullptr);
  mean_loss_accumulate_kernel<<<1, kThreads, 0, stream>>>(scalars, losses, n, count);
  GPT2_CUDA_CHECK_LAUNCH();
}

void clip_decision(StepScalars* scalars, int micro_batches, float grad_clip,
                   cudaStream_t stream) {
  GPT2_CHECK(micro_batches >= 1, micro_batches, " micro-batches");
  GPT2_CHECK(scalars != nullptr);
  clip_decision_kernel<<<1, 1, 0, stream>>>(scalars, micro_batches, grad_clip);
  GPT2_CUDA_CHECK_LAUNCH();
}

void sum_rank_scalars(StepScalars* scalars, const double* gathered, int world, bool sum_norm,
                      cudaStream_t stream) {
  GPT2_CHECK(world >= 1, "world size ", world);
  GPT2_CHECK(scalars != nullptr && gathered != nullptr);
  sum_rank_scalars_kernel<<<1, 1, 0, stream>>>(scalars, gathered, world, sum_norm);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt2::gpu
