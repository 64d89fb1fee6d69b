/**
 * @file attention_hopper_tiles.cuh
 * @brief Typed shared-memory tiles and pipeline barriers of the Hopper (sm_90a) flash-attention
 * kernels (device code; include from .cu files).
 *
 * SmemTile<kRows, kCols>: a kRows x kCols bf16 tile (a head slice: rows = sequence positions,
 * columns = head dims) stored as kCols/64 column blocks of kRows x 64, each 128-byte rows with
 * the 128-byte swizzle, 1024-byte aligned: exactly what a TMA box of {64, kRows} with
 * CU_TENSOR_MAP_SWIZZLE_128B writes, and what wgmma descriptors read. It hands out the wgmma
 * descriptors of its sub-tiles in both majors:
 *  - k_major(row0, kk): rows [row0, row0 + M or N) as the M/N dimension, head dims
 *    [16 kk, 16 kk + 16) as K (Q or K in S = Q K^T, K in S^T = K Q^T).
 *  - mn_major(row0, column_block): rows [row0, row0 + 16) as K, the columns from column block
 *    column_block on as M/N (V in O += P V; dO and Q in dV += P^T dO and dK += dS^T Q; dS^T
 *    and K in dQ = dS K).
 * current_device_sms: a host helper of the launchers.
 */
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_runtime.h>

#include "base/error.h"

#include "kernels/gpu/hopper_primitives.cuh"

namespace gpt2::gpu::hopper {

template <int kRows_, int kCols_>
struct SmemTile {
  static constexpr int kRows = kRows_;
  static constexpr int kCols = kCols_;
  static constexpr int kColumnBlocks = kCols / 64;
  static constexpr int kColumnBlockBytes = kRows * 128;
  static constexpr int kBytes = kRows * kCols * 2;
  static_assert(kCols % 64 == 0 && kRows % 8 == 0, "tiles are built of 8 x 64 swizzle atoms");

  uint32_t base;  // shared-memory address, 1024-byte aligned

  __device__ __forceinline__ uint64_t k_major(int row0, int kk) const {
    return smem_descriptor(base + (kk / 4) * kColumnBlockBytes + row0 * 128 + (kk % 4) * 32, 16,
                           1024);
  }

  __device__ __forceinline__ uint64_t mn_major(int row0, int column_block = 0) const {
    return smem_descriptor(base + column_block * kColumnBlockBytes + row0 * 128,
                           kColumnBlockBytes, 1024);
  }

  /// Byte address of element (row, col) (for ordinary loads and stores of the swizzled layout).
  __device__ __forceinline__ uint32_t element(int row, int col) const {
    const int chunk = (col % 64) / 8;
    return base + (col / 64) * kColumnBlockBytes + row * 128 + ((chunk ^ (row % 8)) * 16) +
           (col % 8) * 2;
  }

  /// Issues the TMA copies of rows [row0, row0 + kRows) and columns [col0, col0 + kCols) of a
  /// (dim0 = columns, dim1 = rows, dim2 = batch) tensor map whose box is {64, kRows}.
  __device__ __forceinline__ void load(const CUtensorMap* map, uint32_t bar, int col0, int row0,
                                       int batch) const {
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j)
      tma_load_3d(base + j * kColumnBlockBytes, map, bar, col0 + 64 * j, row0, batch);
  }
};

/// Host: streaming multiprocessors of the current device.
inline int current_device_sms() {
  int device = 0, sms = 0;
  GPT2_CUDA_CHECK(cudaGetDevice(&device));
  GPT2_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

/// Fast 2^x (ex2.approx, flush-to-zero): 2^-inf = 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace gpt2::gpu::hopper
