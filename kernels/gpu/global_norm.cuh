/**
 * @file global_norm.cuh
 * @brief Squared L2 norm of a gradient vector on the GPU, for clipping and logging.
 *        CPU twin: kernels/cpu/global_norm.h.
 *
 * result (one device double) = sum_i grads[i]^2, grads N elements of T_ = float or bf16.
 * Two passes, no atomics, bitwise deterministic on any GPU: the number of blocks depends only
 * on N (global_norm_num_blocks); each thread accumulates its grid-stride elements in fp32 (16
 * bytes at a time when grads is 16-byte aligned, so the order depends on N and that alignment)
 * and each block reduces its threads in a fixed order into partials[block] (fp32); then one
 * block adds the partials in double in a fixed order and writes *result.
 * partials: global_norm_num_blocks(N) floats of scratch (at most kGlobalNormMaxBlocks).
 * global_norm_squared_to_host: the same, then waits for the stream and returns the value.
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace gpt2::gpu {

constexpr int kGlobalNormMaxBlocks = 1024;

/// Blocks of the first pass, = floats of partials scratch, for N elements (>= 1).
int global_norm_num_blocks(int64_t N);

template <typename T_>
void global_norm_squared(double* result, const T_* grads, int64_t N, float* partials,
                         cudaStream_t stream);

template <typename T_>
double global_norm_squared_to_host(const T_* grads, int64_t N, float* partials, double* result,
                                   cudaStream_t stream);

}  // namespace gpt2::gpu
