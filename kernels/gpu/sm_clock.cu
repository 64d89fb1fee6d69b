/**
 * @file sm_clock.cu
 * @brief gpu::sm_clock_mhz (sm_clock.cuh): cycles over global-timer nanoseconds, one thread.
 */
#include "kernels/gpu/sm_clock.cuh"

#include <cstdint>

#include "base/error.h"

namespace gpt2::gpu {
namespace {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

// counts[0] = SM cycles, counts[1] = nanoseconds of a window of at least window_ns.
__global__ void count_sm_cycles_kernel(uint64_t window_ns, long long* counts) {
  const uint64_t t0 = global_timer_ns();
  const long long c0 = clock64();
  uint64_t t1 = t0;
  while (t1 - t0 < window_ns) t1 = global_timer_ns();
  const long long c1 = clock64();
  counts[0] = c1 - c0;
  counts[1] = static_cast<long long>(t1 - t0);
}

}  // namespace

double sm_clock_mhz(cudaStream_t stream, int window_us) {
  GPT2_CHECK(window_us >= 1, "sm_clock_mhz: window_us = ", window_us, " (at least 1)");
  long long* counts = nullptr;
  GPT2_CUDA_CHECK(cudaMallocAsync(&counts, 2 * sizeof(long long), stream));
  count_sm_cycles_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(window_us) * 1000, counts);
  GPT2_CUDA_CHECK_LAUNCH();
  long long host[2] = {0, 0};
  GPT2_CUDA_CHECK(cudaMemcpyAsync(host, counts, sizeof(host), cudaMemcpyDeviceToHost, stream));
  GPT2_CUDA_CHECK(cudaFreeAsync(counts, stream));
  GPT2_CUDA_CHECK(cudaStreamSynchronize(stream));
  // Cycles per nanosecond = GHz; times 1000 for MHz.
  return host[1] > 0 ? 1000.0 * static_cast<double>(host[0]) / static_cast<double>(host[1]) : 0.0;
}

}  // namespace gpt2::gpu
