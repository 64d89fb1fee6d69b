/**
 * @file common.cuh
 * @brief Device helpers shared by the CUDA ops (device code: include from .cu files only).
 *
 * - Storage types T_ = float or __nv_bfloat16: to_float / from_float<T_> (bf16 rounding is
 *   round-to-nearest-even), so every kernel loads T_, computes in fp32 and stores T_.
 * - Pack16<T_>: 16 bytes of T_ (4 floats or 8 bf16) moved by one 128-bit load/store; callers
 *   check is_aligned16 on every pointer and fall back to scalar code otherwise.
 * - Warp and block sum/max reductions with a fixed combination order (xor butterfly, then the
 *   warp partials in warp order), so a reduction gives the same bits on every run and every
 *   thread of the warp/block receives the same value.
 * - Deterministic column sums of a row-major (rows, cols) matrix in two passes: per chunk of
 *   kColumnSumRowsPerChunk rows into an fp32 scratch (chunks, cols), then chunks summed in
 *   order and added (+=) to the target. Used by the matmul bias gradient and (its second
 *   pass) the LayerNorm parameter gradients. No atomics.
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "base/error.h"

namespace gpt2::gpu {

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------------------
// Storage types

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T_>
__device__ __forceinline__ T_ from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

/// 16 bytes of T_, loaded and stored as one int4.
template <typename T_>
struct alignas(16) Pack16 {
  static constexpr int kSize = 16 / static_cast<int>(sizeof(T_));
  T_ values[kSize];
};

template <typename T_>
__device__ __forceinline__ Pack16<T_> load_pack16(const T_* ptr) {
  Pack16<T_> pack;
  *reinterpret_cast<int4*>(&pack) = *reinterpret_cast<const int4*>(ptr);
  return pack;
}

template <typename T_>
__device__ __forceinline__ void store_pack16(T_* ptr, const Pack16<T_>& pack) {
  *reinterpret_cast<int4*>(ptr) = *reinterpret_cast<const int4*>(&pack);
}

inline bool is_aligned16(const void* ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
}

/// Largest power of two (up to 256) dividing the address: what a vector access or cuBLASLt
/// may assume.
inline uint32_t alignment_bytes(const void* ptr) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

/// Blocks of `threads` threads covering n work items (one item per thread).
inline unsigned int grid_size(int64_t n, int threads) {
  const int64_t blocks = ceil_div(n, threads);
  GPT2_CHECK(blocks >= 1 && blocks <= INT32_MAX, "grid of ", blocks, " blocks");
  return static_cast<unsigned int>(blocks);
}

// ---------------------------------------------------------------------------------------------
// Reductions. Block versions require blockDim.x to be a multiple of 32 (at most 1024) and must
// be reached by every thread of the block (they synchronize).

constexpr unsigned int kFullWarpMask = 0xffffffffu;

template <typename Acc>
__device__ __forceinline__ Acc warp_reduce_sum(Acc value) {
  // a + b == b + a bitwise, so after each butterfly step all lanes hold identical partials.
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(kFullWarpMask, value, offset);
  return value;
}

__device__ __forceinline__ float warp_reduce_max(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    value = fmaxf(value, __shfl_xor_sync(kFullWarpMask, value, offset));
  return value;
}

/// Sum over the block, returned to every thread. `scratch` is 32 Acc of shared memory; the
/// leading barrier lets consecutive calls reuse it.
template <typename Acc>
__device__ __forceinline__ Acc block_reduce_sum(Acc value, Acc* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int num_warps = blockDim.x / 32;
  value = warp_reduce_sum(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  Acc total = lane < num_warps ? scratch[lane] : Acc(0);
  return warp_reduce_sum(total);
}

__device__ __forceinline__ float block_reduce_max(float value, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int num_warps = blockDim.x / 32;
  value = warp_reduce_max(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  const float total = lane < num_warps ? scratch[lane] : -INFINITY;
  return warp_reduce_max(total);
}

// ---------------------------------------------------------------------------------------------
// Deterministic column sums: target[c] += sum_r matrix[r, c], r in [0, rows).

constexpr int kColumnSumRowsPerChunk = 64;
constexpr int kColumnSumThreads = 256;

/// Floats of scratch column sums over `rows` rows of `cols` columns need.
inline int64_t column_sum_scratch_floats(int64_t rows, int64_t cols) {
  return ceil_div(rows, kColumnSumRowsPerChunk) * cols;
}

/// partials[chunk, c] = sum of matrix[r, c] over the chunk's rows, in row order.
/// Grid (ceil(cols / blockDim.x), chunks); thread = column, so loads coalesce along a row.
template <typename T_>
__global__ void column_partial_sums_kernel(float* partials, const T_* matrix, int64_t rows,
                                           int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t chunk = blockIdx.y;
  const int64_t row_begin = chunk * kColumnSumRowsPerChunk;
  const int64_t row_end = min(row_begin + kColumnSumRowsPerChunk, rows);
  float sum = 0.0f;
  for (int64_t r = row_begin; r < row_end; ++r) sum += to_float(matrix[r * cols + c]);
  partials[chunk * cols + c] = sum;
}

/// The same partials with a 16-byte pack of columns per thread (cols a multiple of the pack,
/// matrix 16-byte aligned): each column still sums its rows in row order, so the bits are those
/// of column_partial_sums_kernel, from a quarter (fp32) or an eighth (bf16) of the loads.
/// Grid (ceil(cols / pack / blockDim.x), chunks).
template <typename T_>
__global__ void column_partial_sums_packed_kernel(float* partials, const T_* matrix,
                                                  int64_t rows, int cols) {
  constexpr int kPack = Pack16<T_>::kSize;
  const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * kPack;
  if (c0 >= cols) return;
  const int64_t chunk = blockIdx.y;
  const int64_t row_begin = chunk * kColumnSumRowsPerChunk;
  const int64_t row_end = min(row_begin + kColumnSumRowsPerChunk, rows);
  float sum[kPack] = {};
#pragma unroll 8
  for (int64_t r = row_begin; r < row_end; ++r) {
    const Pack16<T_> pack = load_pack16(matrix + r * cols + c0);
#pragma unroll
    for (int j = 0; j < kPack; ++j) sum[j] += to_float(pack.values[j]);
  }
#pragma unroll
  for (int j = 0; j < kPack; ++j) partials[chunk * cols + c0 + j] = sum[j];
}

/// partials (ceil(rows / kColumnSumRowsPerChunk), cols) of matrix (rows, cols): packed when
/// cols and matrix allow, else a thread per column.
template <typename T_>
void launch_column_partial_sums(float* partials, const T_* matrix, int64_t rows, int cols,
                                cudaStream_t stream) {
  const int64_t chunks = ceil_div(rows, kColumnSumRowsPerChunk);
  constexpr int kPack = Pack16<T_>::kSize;
  if (cols % kPack == 0 && is_aligned16(matrix)) {
    const dim3 grid(grid_size(cols / kPack, kColumnSumThreads), static_cast<unsigned int>(chunks));
    column_partial_sums_packed_kernel<<<grid, kColumnSumThreads, 0, stream>>>(partials, matrix,
                                                                             rows, cols);
  } else {
    const dim3 grid(grid_size(cols, kColumnSumThreads), static_cast<unsigned int>(chunks));
    column_partial_sums_kernel<<<grid, kColumnSumThreads, 0, stream>>>(partials, matrix, rows,
                                                                      cols);
  }
  GPT2_CUDA_CHECK_LAUNCH();
}

/// target[c] += sum over chunks of partials[chunk, c]. Per column, lane l of 32 sums chunks l,
/// l+32, l+64, ... in order, then the fixed xor butterfly combines the 32 lanes' sums, so the
/// result is the same on every run. A block takes 32 columns: thread (x, y) sums column x's
/// chunks y, y+32, ... (a row of 32 columns a load: 128 contiguous bytes, where a warp a column
/// read 32 rows 4 bytes each), the sums meet in shared memory, and warp y adds up column y's.
constexpr int kAddPartialsColumns = 32;

/// Two targets in one launch (blockIdx.y 0 the first, 1 the second) when target_b is set.
template <typename T_>
__global__ void __launch_bounds__(32 * kAddPartialsColumns)
    add_column_partials_kernel(T_* target_a, const float* partials_a, T_* target_b,
                               const float* partials_b, int64_t chunks, int cols) {
  __shared__ float lane_sums[32][kAddPartialsColumns + 1];  // [lane][column]; +1: no conflicts
  T_* target = blockIdx.y == 0 ? target_a : target_b;
  const float* partials = blockIdx.y == 0 ? partials_a : partials_b;
  const int x = threadIdx.x % kAddPartialsColumns;
  const int y = threadIdx.x / kAddPartialsColumns;
  const int c = blockIdx.x * kAddPartialsColumns + x;
  float sum = 0.0f;
  if (c < cols)
    for (int64_t k = y; k < chunks; k += 32) sum += partials[k * cols + c];
  lane_sums[y][x] = sum;
  __syncthreads();
  const int column = blockIdx.x * kAddPartialsColumns + y;  // warp y's column
  if (column >= cols) return;  // whole warps
  const float total = warp_reduce_sum(lane_sums[x][y]);  // lane x: column y's lane-x sum
  if (x == 0) target[column] = from_float<T_>(to_float(target[column]) + total);
}

template <typename T_>
void launch_add_column_partials(T_* target, const float* partials, int64_t chunks, int cols,
                                cudaStream_t stream) {
  add_column_partials_kernel<<<grid_size(cols, kAddPartialsColumns), 32 * kAddPartialsColumns,
                               0, stream>>>(target, partials, static_cast<T_*>(nullptr), nullptr,
                                            chunks, cols);
  GPT2_CUDA_CHECK_LAUNCH();
}

/// The same for two targets of `cols` columns each (LayerNorm's dweight and dbias), one launch.
template <typename T_>
void launch_add_column_partials_pair(T_* target_a, const float* partials_a, T_* target_b,
                                     const float* partials_b, int64_t chunks, int cols,
                                     cudaStream_t stream) {
  const dim3 grid(grid_size(cols, kAddPartialsColumns), 2);
  add_column_partials_kernel<<<grid, 32 * kAddPartialsColumns, 0, stream>>>(
      target_a, partials_a, target_b, partials_b, chunks, cols);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt2::gpu
