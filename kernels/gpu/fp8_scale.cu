/**
 * @file fp8_scale.cu
 * @brief fp8_update_scales (fp8_scale.cuh): one thread per tensor, cpu::Fp8Scale's arithmetic.
 */
#include "kernels/gpu/fp8_scale.cuh"

#include <cmath>

#include "base/error.h"
#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {
namespace {

__device__ void update_scale(Fp8ScaleState& s, int slot, int history, int margin) {
  s.history[slot] = s.amax;
  s.amax = 0.0f;
  float largest = 0.0f;
  for (int h = 0; h < history; ++h)
    if (isfinite(s.history[h])) largest = fmaxf(largest, s.history[h]);
  if (!(largest > 0.0f)) return;  // nothing to scale by: keep the scale
  double next = double(s.fp8_max) / double(largest) / ldexp(1.0, margin);
  next = ldexp(1.0, static_cast<int>(floor(log2(next))));
  const float scale = static_cast<float>(next);
  if (!isfinite(scale) || scale == 0.0f) return;
  s.scale = scale;
  s.inverse = 1.0f / scale;
}

__global__ void fp8_update_scales_kernel(Fp8ScaleState* states, int count, int slot,
                                         int history, int margin, uint32_t* saturated,
                                         uint32_t* saturated_by_state) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  Fp8ScaleState& s = states[i];
  // cpu::Fp8Scale::saturates, at the scale the casts used (before this update moves it).
  if (isfinite(s.amax) && s.amax * s.scale > s.fp8_max) {
    if (saturated != nullptr) atomicAdd(saturated, 1u);
    if (saturated_by_state != nullptr) ++saturated_by_state[i];
  }
  update_scale(s, slot, history, margin);
}

__global__ void fp8_scale_from_bound_kernel(Fp8ScaleState* state, float bound) {
  state->amax = fabsf(bound);
  update_scale(*state, 0, 1, 0);
}

}  // namespace

Fp8ScaleState fp8_initial_state(cpu::Fp8Format format, float scale) {
  GPT2_CHECK(scale > 0.0f && std::isfinite(scale), "an FP8 scale of ", scale);
  Fp8ScaleState state;
  state.scale = scale;
  state.inverse = 1.0f / scale;
  state.fp8_max = cpu::fp8_max(format);
  return state;
}

void fp8_scale_from_bound(Fp8ScaleState* state, float bound, cudaStream_t stream) {
  GPT2_CHECK(state != nullptr, "fp8_scale_from_bound without a state");
  fp8_scale_from_bound_kernel<<<1, 1, 0, stream>>>(state, bound);
  GPT2_CUDA_CHECK_LAUNCH();
}

void fp8_update_scales(Fp8ScaleState* states, int count, int64_t update, int history,
                       int margin, cudaStream_t stream, uint32_t* saturated,
                       uint32_t* saturated_by_state) {
  GPT2_CHECK(count >= 0 && update >= 0 && history >= 1 && history <= kFp8History,
             "fp8_update_scales of ", count, " states, update ", update, ", history ", history);
  if (count == 0) return;
  const int threads = 128;
  fp8_update_scales_kernel<<<static_cast<unsigned>(ceil_div(count, threads)), threads, 0,
                             stream>>>(states, count, static_cast<int>(update % history), history,
                                       margin, saturated, saturated_by_state);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt2::gpu
