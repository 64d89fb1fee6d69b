/**
 * @file sm_clock.cuh
 * @brief gpu::sm_clock_mhz: the SM clock the device runs at now, measured on the device.
 *
 * One thread counts SM cycles (clock64) over a window of the global timer (nanoseconds) and the
 * host divides. Read right after a timed burst of kernels, it tells the clock the burst ended
 * at: under sustained load the power cap holds an H100 at 1.68-1.80 GHz rather than its 1.98
 * GHz maximum (bench/NOTES.md, session nineteen), which `nvidia-smi`'s samples mostly miss.
 * Synchronizes the stream. For the benchmarks; nothing in training calls it.
 */
#pragma once

#include <cuda_runtime.h>

namespace gpt2::gpu {

/// The SM clock in MHz over a window of about `window_us` microseconds (>= 1) on `stream`.
double sm_clock_mhz(cudaStream_t stream, int window_us = 200);

}  // namespace gpt2::gpu
