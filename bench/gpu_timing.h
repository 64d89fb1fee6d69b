/**
 * @file gpu_timing.h
 * @brief What the kernel benchmarks share: a device allocation owned for a scope, and the median
 *        of event-timed runs after warm-up. Header-only; bench/ only.
 */
#pragma once

#include <algorithm>
#include <chrono>
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

/// How median_ms times: `warmup` untimed calls, then, with warmup_ms > 0, more untimed calls
/// back to back until that many milliseconds of them have run; then `repeats` event-timed runs
/// of `burst` calls. Why the time: under the power cap the first tens of milliseconds after an
/// idle gap run at boost clock while the cap's controller catches up, and a timing of 40 calls
/// fits inside that (the racing backward at head size 128, 8K: 553-583 TFLOP/s timed after the
/// bench's set-up pause, 511-543 when timed again at once, session twenty-four). A warm-up of
/// about a second times the sustained load that training gives the kernels.
struct TimingPlan {
  int warmup = 3, repeats = 10, burst = 4;
  double warmup_ms = 0;
};

/// The options every kernel benchmark takes: --warmup, --warmup-ms, --repeats, --burst (a
/// TimingPlan, timing_plan), --csv and --help.
inline void add_timing_options(cxxopts::Options& cli, int warmup, int repeats,
                               const std::string& csv) {
  cli.add_options()
      ("warmup", "untimed calls", cxxopts::value<int>()->default_value(std::to_string(warmup)))
      ("warmup-ms", "then untimed calls until this many ms of them have run (0: none; ~1000 "
                    "times the sustained load, at the clock the power cap holds)",
       cxxopts::value<double>()->default_value("0"))
      ("repeats", "timed runs", cxxopts::value<int>()->default_value(std::to_string(repeats)))
      ("burst", "calls per timed run, back to back (the time reported per call)",
       cxxopts::value<int>()->default_value("4"))
      ("csv", "CSV output", cxxopts::value<std::string>()->default_value(csv))
      ("h,help", "print this help");
}

/// The TimingPlan of add_timing_options' options; a usage error (exit 2) names a bad one.
inline TimingPlan timing_plan(const cxxopts::ParseResult& args) {
  TimingPlan plan;
  plan.warmup = args["warmup"].as<int>();
  plan.warmup_ms = args["warmup-ms"].as<double>();
  plan.repeats = args["repeats"].as<int>();
  plan.burst = args["burst"].as<int>();
  if (plan.warmup < 0) GPT2_USAGE_FAIL("--warmup must be >= 0 (got ", plan.warmup, ")");
  if (!(plan.warmup_ms >= 0 && plan.warmup_ms <= 600000))
    GPT2_USAGE_FAIL("--warmup-ms takes 0 to 600000 (got ", plan.warmup_ms, ")");
  if (plan.repeats < 1) GPT2_USAGE_FAIL("--repeats must be >= 1 (got ", plan.repeats, ")");
  if (plan.burst < 1) GPT2_USAGE_FAIL("--burst must be >= 1 (got ", plan.burst, ")");
  return plan;
}

/// "median of R runs of B calls after W" (and "+ N ms"), for a benchmark's heading.
inline std::string describe(const TimingPlan& plan) {
  std::string text = "median of " + std::to_string(plan.repeats) + " runs of " +
                     std::to_string(plan.burst) + " calls after " + std::to_string(plan.warmup);
  if (plan.warmup_ms > 0) text += " + " + std::to_string(static_cast<long>(plan.warmup_ms)) + " ms";
  return text;
}

/// Median over plan.repeats event-timed runs of plan.burst back-to-back calls launch(i) (per
/// call), after the plan's warm-up; i counts every call, so the input sets rotate. With
/// end_sm_mhz, also the SM clock read once right after the last run (gpu::sm_clock_mhz, outside
/// the timed spans, so the runs keep the duty cycle PyTorch's script gives its kernels): the
/// clock the power cap left the timing at.
template <typename F>
double median_ms(F&& launch, const TimingPlan& plan, cudaStream_t stream,
                 double* end_sm_mhz = nullptr) {
  cudaEvent_t start, stop;
  GPT2_CUDA_CHECK(cudaEventCreate(&start));
  GPT2_CUDA_CHECK(cudaEventCreate(&stop));
  int call = 0;
  for (; call < plan.warmup; ++call) launch(call);
  if (plan.warmup_ms > 0) {
    // Bursts of calls, each followed by an event, one burst queued ahead of the one waited
    // for, so that the GPU does not idle while the host checks the time.
    cudaEvent_t burst_done[2] = {start, stop};
    const auto begin = std::chrono::steady_clock::now();
    for (int b = 0;; ++b) {
      for (int j = 0; j < plan.burst; ++j) launch(call++);
      GPT2_CUDA_CHECK(cudaEventRecord(burst_done[b % 2], stream));
      if (b > 0) GPT2_CUDA_CHECK(cudaEventSynchronize(burst_done[(b - 1) % 2]));
      const std::chrono::duration<double, std::milli> ran =
          std::chrono::steady_clock::now() - begin;
      if (ran.count() >= plan.warmup_ms) break;
    }
  }
  std::vector<double> times;
  for (int i = 0; i < plan.repeats; ++i) {
    GPT2_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int j = 0; j < plan.burst; ++j) launch(call++);
    GPT2_CUDA_CHECK(cudaEventRecord(stop, stream));
    GPT2_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    GPT2_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms / plan.burst);
  }
  if (end_sm_mhz) *end_sm_mhz = gpu::sm_clock_mhz(stream);
  GPT2_CUDA_CHECK(cudaEventDestroy(start));
  GPT2_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace gpt2::bench
