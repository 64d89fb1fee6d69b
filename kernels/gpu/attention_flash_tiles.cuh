/**
 * @file attention_flash_tiles.cuh
 * @brief Shared pieces of the bf16 flash-attention kernels (device code; include from .cu).
 *
 * A "head tile" is kRows consecutive sequence positions of one head's Q, K, V, O or dO slice:
 * row r is kHeadDim bf16 values at head_base + (row0 + r) * row_stride. Tiles live in shared
 * memory as swizzled rows of kHeadDim/8 16-byte chunks (mma::swizzled_offset). Rows at or past
 * num_rows (= T) are zero-filled, which makes ragged last tiles harmless for the GEMMs; the
 * kernels mask their scores separately. Also the launchers' shared host helpers (and, through
 * attention_flash_common.cuh, what the Hopper kernels share with these).
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "base/error.h"
#include "kernels/gpu/attention_flash_common.cuh"
#include "kernels/gpu/mma_primitives.cuh"

namespace gpt2::gpu::flash {

/// Issues (does not wait for) the cp.async copies of one head tile.
template <int kRows, int kHeadDim, int kThreads>
__device__ __forceinline__ void load_head_tile_async(uint32_t smem_tile,
                                                     const __nv_bfloat16* head_base,
                                                     int64_t row_stride, int row0, int num_rows,
                                                     int tid) {
  constexpr int kRowChunks = kHeadDim / 8;
  constexpr int kChunks = kRows * kRowChunks;
  static_assert(kChunks % kThreads == 0, "tile chunks must divide evenly among the threads");
#pragma unroll
  for (int it = 0; it < kChunks / kThreads; ++it) {
    const int i = tid + it * kThreads;
    const int row = i / kRowChunks;
    const int chunk = i % kRowChunks;
    const bool valid = row0 + row < num_rows;
    const __nv_bfloat16* src =
        valid ? head_base + static_cast<int64_t>(row0 + row) * row_stride + chunk * 8 : head_base;
    mma::cp_async_16(smem_tile + mma::swizzled_offset<kRowChunks>(row, chunk), src, valid);
  }
}

/// A-operand fragment (16x16) of rows [row0, row0+16), columns [16*kk, 16*kk+16) of a tile
/// whose rows are the GEMM's M dimension (plain ldmatrix).
template <int kRowChunks>
__device__ __forceinline__ void load_a_fragment(uint32_t (&frag)[4], uint32_t tile, int row0,
                                                int kk, int lane) {
  const int row = row0 + (lane % 8) + ((lane / 8) % 2) * 8;
  const int chunk = kk * 2 + lane / 16;
  mma::ldmatrix_x4(frag, tile + mma::swizzled_offset<kRowChunks>(row, chunk));
}

/// B-operand fragments of two adjacent 8-column n-tiles (rows [n0, n0+16) of a tile whose rows
/// are the GEMM's N dimension, columns [16*kk, +16) the K dimension): frag[0..1] for rows
/// n0..n0+7, frag[2..3] for rows n0+8..n0+15 (plain ldmatrix).
template <int kRowChunks>
__device__ __forceinline__ void load_b_fragments_nk(uint32_t (&frag)[4], uint32_t tile, int n0,
                                                    int kk, int lane) {
  const int row = n0 + (lane % 8) + (lane / 16) * 8;
  const int chunk = kk * 2 + (lane / 8) % 2;
  mma::ldmatrix_x4(frag, tile + mma::swizzled_offset<kRowChunks>(row, chunk));
}

/// B-operand fragments of two adjacent n-tiles (columns [16*nn, +16)) from a tile whose rows are
/// the GEMM's K dimension (rows [k0, k0+16)): transposed ldmatrix. frag[0..1] for columns
/// 16*nn..+7, frag[2..3] for 16*nn+8..+15.
template <int kRowChunks>
__device__ __forceinline__ void load_b_fragments_kn(uint32_t (&frag)[4], uint32_t tile, int k0,
                                                    int nn, int lane) {
  const int row = k0 + (lane % 8) + ((lane / 8) % 2) * 8;
  const int chunk = nn * 2 + lane / 16;
  mma::ldmatrix_x4_trans(frag, tile + mma::swizzled_offset<kRowChunks>(row, chunk));
}

/// A-operand fragment (16x16) of the TRANSPOSE of a stored tile: A rows are stored columns
/// [m0, m0+16), A columns are stored rows [k0, k0+16) (transposed ldmatrix).
template <int kRowChunks>
__device__ __forceinline__ void load_a_fragment_transposed(uint32_t (&frag)[4], uint32_t tile,
                                                           int m0, int k0, int lane) {
  const int row = k0 + (lane % 8) + (lane / 16) * 8;
  const int chunk = m0 / 8 + (lane / 8) % 2;
  mma::ldmatrix_x4_trans(frag, tile + mma::swizzled_offset<kRowChunks>(row, chunk));
}

/// The C fragments of n-tiles 2kk and 2kk+1 (16x8 fp32 each) as one bf16 A fragment (16x16).
__device__ __forceinline__ void accumulators_to_a_fragment(uint32_t (&frag)[4],
                                                           const float (&lo)[4],
                                                           const float (&hi)[4]) {
  frag[0] = mma::pack_bf16x2(lo[0], lo[1]);
  frag[1] = mma::pack_bf16x2(lo[2], lo[3]);
  frag[2] = mma::pack_bf16x2(hi[0], hi[1]);
  frag[3] = mma::pack_bf16x2(hi[2], hi[3]);
}

/// acc[0] and acc[1], two 8-column n-tiles, += a (a 16x16 A fragment) times the two n-tiles of
/// b (the four registers load_b_fragments_nk/_kn give).
__device__ __forceinline__ void mma_two_n_tiles(float (*acc)[4], const uint32_t (&a)[4],
                                                const uint32_t (&b)[4]) {
  mma::mma_bf16_16816(acc[0], a, b[0], b[1]);
  mma::mma_bf16_16816(acc[1], a, b[2], b[3]);
}

/// Two GEMM slices in one loop, as the backward's S^T/dP^T and dV/dK are computed: for each of
/// kSteps k-steps (unrolled by kUnroll), load_a(kk, a_x, a_y) gives two A fragments, and for each
/// of kNPairs pairs of n-tiles load_b(kk, nn, b_x, b_y) two B fragments;
/// acc_x[2nn, 2nn+1] += a_x b_x and acc_y[2nn, 2nn+1] += a_y b_y.
template <int kSteps, int kNPairs, int kUnroll, typename LoadA, typename LoadB>
__device__ __forceinline__ void mma_pair_loop(float (*acc_x)[4], float (*acc_y)[4], LoadA load_a,
                                              LoadB load_b) {
#pragma unroll(kUnroll)
  for (int kk = 0; kk < kSteps; ++kk) {
    uint32_t a_x[4], a_y[4];
    load_a(kk, a_x, a_y);
#pragma unroll
    for (int nn = 0; nn < kNPairs; ++nn) {
      uint32_t b_x[4], b_y[4];
      load_b(kk, nn, b_x, b_y);
      mma_two_n_tiles(acc_x + 2 * nn, a_x, b_x);
      mma_two_n_tiles(acc_y + 2 * nn, a_y, b_y);
    }
  }
}

/// The head a thread block works on (blockIdx.y = b * NH + h) and where its rows of Q, K and V
/// start in qkv (B, T, 3C), row stride 3C.
template <int kHeadDim>
struct BlockHead {
  int bh, b, h;
  int64_t qkv_stride;
  const __nv_bfloat16 *q_base, *k_base, *v_base;
  __device__ BlockHead(const __nv_bfloat16* qkv, int T, int C, int NH)
      : bh(blockIdx.y), b(bh / NH), h(bh % NH), qkv_stride(3LL * C),
        q_base(qkv + static_cast<int64_t>(b) * T * qkv_stride + h * kHeadDim),
        k_base(q_base + C), v_base(q_base + 2 * C) {}
};

// ---------------------------------------------------------------------------------------------
// Host side, shared by the flash launchers (bf16 tensor-core and fp32 SIMT)

/// Launches kernel<<<grid, threads, smem_bytes>>>(params), first raising the kernel's
/// dynamic shared-memory limit when it needs more than the default 48 KB.
template <typename Params>
void launch_with_smem(void (*kernel)(Params), dim3 grid, int threads, int smem_bytes,
                      const Params& params, cudaStream_t stream) {
  if (smem_bytes > 48 * 1024) {
    GPT2_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  }
  kernel<<<grid, threads, smem_bytes, stream>>>(params);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt2::gpu::flash
