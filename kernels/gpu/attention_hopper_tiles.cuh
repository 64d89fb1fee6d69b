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
 * SmemRegion: a named region of a kernel's shared memory (offset and size); a layout is the list
 *   of its regions, each laid after the one before (next), in place of a chain of offset sums.
 * StageRing<kStages>: a ring of stages with their full and empty mbarriers, indexed by use.
 * AccumulatorLayout: where accumulator i of a wgmma fragment sits (row and column).
 * current_device_sms: a host helper of the launchers.
 */
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_runtime.h>

#include "base/error.h"

#include "kernels/gpu/hopper_primitives.cuh"

namespace gpt2::gpu::hopper {

/// Bytes [offset, offset + bytes) of a kernel's shared memory, from its 1024-byte aligned base.
/// next(bytes, align) is the region laid right after this one, its offset rounded up to align
/// (1024 for swizzled tiles, which TMA and wgmma read from 1024-byte boundaries).
struct SmemRegion {
  int offset;
  int bytes;
  constexpr int end() const { return offset + bytes; }
  constexpr SmemRegion next(int next_bytes, int align = 1) const {
    return {(end() + align - 1) / align * align, next_bytes};
  }
};

template <int kRows_, int kCols_>
struct SmemTile {
  static constexpr int kRows = kRows_;
  static constexpr int kCols = kCols_;
  static constexpr int kColumnBlocks = kCols / 64;
  static constexpr int kColumnBlockBytes = kRows * 128;
  static constexpr int kBytes = kRows * kCols * 2;
  static_assert(kCols % 64 == 0 && kRows % 8 == 0, "tiles are built of 8 x 64 swizzle atoms");

  uint32_t base;  // shared-memory address, 1024-byte aligned

  // The descriptors are the tile's base descriptor moved by the sub-tile's offset, so that the
  // base one is computed once and each sub-tile's costs one add.
  __device__ __forceinline__ uint64_t k_major(int row0, int kk) const {
    return descriptor_moved(smem_descriptor(base, 16, 1024),
                            (kk / 4) * kColumnBlockBytes + row0 * 128 + (kk % 4) * 32);
  }

  __device__ __forceinline__ uint64_t mn_major(int row0, int column_block = 0) const {
    return descriptor_moved(smem_descriptor(base, kColumnBlockBytes, 1024),
                            column_block * kColumnBlockBytes + row0 * 128);
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

  /// Issues the TMA stores of the tile's rows [first_row, first_row + box1) to rows
  /// [row0, row0 + box1) and columns [col0, col0 + kCols) of a (columns, rows, batch) tensor map
  /// whose box is {64, box1} (one bulk group: the caller commits and waits). first_row: a
  /// multiple of 8, so the rows keep the swizzle's phase.
  __device__ __forceinline__ void store(const CUtensorMap* map, int first_row, int col0, int row0,
                                        int batch) const {
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j)
      tma_store_3d(map, base + j * kColumnBlockBytes + first_row * 128, col0 + 64 * j, row0,
                   batch);
  }
};

/// A ring of kStages shared-memory stages, each guarded by a "full" mbarrier (the producer's
/// copies landed) and an "empty" one (every consumer released it), used in order: use `it`
/// (0, 1, 2, ...) takes stage it % kStages, and is that stage's (it / kStages)-th fill, so its
/// full barrier completes phase (it / kStages) and its empty barrier, for the next fill, the
/// phase after. The barriers of stage s are full_base + 8 s and empty_base + 8 s. In place of
/// hand-computed stages and parities; FlashAttention-3's PipelineState carries the same count.
template <int kStages_>
struct StageRing {
  static constexpr int kStages = kStages_;
  uint32_t full_base, empty_base;

  __device__ __forceinline__ static int stage(int it) { return it % kStages; }
  __device__ __forceinline__ uint32_t full(int it) const { return full_base + 8 * stage(it); }
  __device__ __forceinline__ uint32_t empty(int it) const { return empty_base + 8 * stage(it); }
  /// One thread: full barriers expect `filled` arrivals (plus the copies' bytes), empty ones
  /// `released`.
  __device__ __forceinline__ void init(uint32_t filled, uint32_t released) const {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full_base + 8 * s, filled);
      mbarrier_init(empty_base + 8 * s, released);
    }
  }
  /// Consumers: until use `it`'s copies landed.
  __device__ __forceinline__ void wait_full(int it) const {
    mbarrier_wait(full(it), (it / kStages) & 1);
  }
  /// The producer, before filling use `it`'s stage: until use it - kStages released it (the
  /// first kStages uses find their stages free).
  __device__ __forceinline__ void wait_empty(int it) const {
    if (it >= kStages) mbarrier_wait(empty(it), (it / kStages - 1) & 1);
  }
  /// A consumer thread done with use `it`'s stage.
  __device__ __forceinline__ void release(int it) const { mbarrier_arrive(empty(it)); }
};

/// Where a thread's accumulators of a wgmma m64nN fragment sit in its warp's 16 x N slice of
/// the warpgroup's 64 x N tile (warp w: rows 16 w .. 16 w + 15): accumulator i of lane l at
/// row l / 4 + row_offset(i) and column 2 (l % 4) + column_offset(i). The lane's part is
/// computed once; i is a compile-time index in the unrolled loops that use the offsets.
struct AccumulatorLayout {
  int row;  // lane / 4: the lane's first row
  int col;  // 2 (lane % 4): the first of the lane's column pair
  __device__ __forceinline__ explicit AccumulatorLayout(int lane)
      : row(lane / 4), col(2 * (lane % 4)) {}
  __device__ __forceinline__ static int row_offset(int i) { return (i % 4) >= 2 ? 8 : 0; }
  __device__ __forceinline__ static int column_offset(int i) { return 8 * (i / 4) + (i % 2); }
};

/// The registers each thread of a block gets at launch when `threads` threads (all blocks an
/// SM holds) share the SM's 64K, as ptxas allots them under __launch_bounds__ (a multiple of
/// 8). setmaxnreg only moves registers between a block's warpgroups: their budgets must sum to
/// no more than this times 128 each, or a warpgroup's increase waits forever.
constexpr int launch_registers(int threads) { return 65536 / threads / 8 * 8; }

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
