/**
 * @file gpu_timing.h
 * @brief What the kernel benchmarks share: a device allocation owned for a scope, and the median
 *        of event-timed runs after warm-up. Header-only; bench/ only.
 */
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <cxxopts.hpp>

#include "base/error.h"
#include "kernels/gpu/sm_clock.cuh"

namespace gpt2::bench {

/// cudaMalloc'ed bytes, freed at scope exit.
struct Buffer {
  explicit Buffer(size_t bytes) { GPT2_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 1))); }
  ~Buffer() { GPT2_CUDA_CHECK_NOTHROW(cudaFree(ptr)); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  void* ptr = nullptr;
};

/// The options every kernel benchmark takes: --warmup, --repeats, --burst (what median_ms
/// reads), --csv and --help.
inline void add_timing_options(cxxopts::Options& cli, int warmup, int repeats,
                               const std::string& csv) {
  cli.add_options()
      ("warmup", "untimed calls", cxxopts::value<int>()->default_value(std::to_string(warmup)))
      ("repeats", "timed runs", cxxopts::value<int>()->default_value(std::to_string(repeats)))
      ("burst", "calls per timed run, back to back (the time reported per call)",
       cxxopts::value<int>()->default_value("4"))
      ("csv", "CSV output", cxxopts::value<std::string>()->default_value(csv))
      ("h,help", "print this help");
}

/// Median over `repeats` event-timed runs of `burst` back-to-back calls launch(i) (per call),
/// after `warmup` untimed calls; i counts every call, so the input sets rotate. With
/// end_sm_mhz, also the SM clock read once right after the last run (gpu::sm_clock_mhz, outside
/// the timed spans, so the runs keep the duty cycle PyTorch's script gives its kernels): the
/// clock the power cap left the timing at.
template <typename F>
double median_ms(F&& launch, int warmup, int repeats, int burst, cudaStream_t stream,
                 double* end_sm_mhz = nullptr) {
  cudaEvent_t start, stop;
  GPT2_CUDA_CHECK(cudaEventCreate(&start));
  GPT2_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) launch(i);
  std::vector<double> times;
  int call = warmup;
  for (int i = 0; i < repeats; ++i) {
    GPT2_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int j = 0; j < burst; ++j) launch(call++);
    GPT2_CUDA_CHECK(cudaEventRecord(stop, stream));
    GPT2_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    GPT2_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms / burst);
  }
  if (end_sm_mhz) *end_sm_mhz = gpu::sm_clock_mhz(stream);
  GPT2_CUDA_CHECK(cudaEventDestroy(start));
  GPT2_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace gpt2::bench
