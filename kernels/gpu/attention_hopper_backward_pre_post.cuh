/**
 * @file attention_hopper_backward_pre_post.cuh
 * @brief The Hopper flash-attention backward's first and last launches (1 and 3 in
 *        attention_hopper_backward.cu, the only file that includes this one).
 *
 * Preprocess: lse2 = lse * log2(e) and D = rowsum(dO * O) per (b, h, t), the semaphores, the
 * work counter and (racing mode) the fp32 dQ accumulator zeroed. Postprocess (racing mode):
 * scale * dQ from the accumulator's fragment-ordered tiles to bf16 in dqkv's query columns (=);
 * its per-pack helpers (dq_pack_*) also serve the deterministic main kernel, which converts its
 * tiles itself.
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/gpu/attention_flash_common.cuh"

namespace gpt2::gpu::hopper_backward {

using bf16 = __nv_bfloat16;

constexpr int kDqTileRows = 64;  // rows of one tile of the dQ accumulator

// Both launches take their blocks' rows last first (block b the rows of block gridDim.x - 1 -
// b, as blocks start in index order): the preprocess leaves the first heads' stats, dO and dQ
// zeros last in L2, where the main kernel's first head group reads them, and the postprocess
// reads the last heads' dQ tiles first, the ones the main kernel finished last, still in L2.

// lse2 = lse * log2(e) and D = rowsum(dO * O) for t < T; +inf and 0 on the padding rows; the
// semaphores, the work counter and, unless null, the dQ accumulator zeroed. HS/8 lanes per
// (bh, t) with t < T_pad, a 16-byte pack each, summed by a butterfly among them.
template <int kHeadDim, int kBlockM>
__global__ void hopper_backward_preprocess_kernel(float* lse2, float* dsum, float* dq_accum,
                                                  int* semaphores, int* work_counter,
                                                  const float* lse,
                                                  const bf16* dout, const bf16* out, int T,
                                                  int T_pad, int NH, int64_t rows) {
  constexpr int kLanesPerRow = kHeadDim / 8;  // a 16-byte pack of the row per lane
  constexpr int kRowsPerWarp = 32 / kLanesPerRow;
  const int lane = threadIdx.x % 32;
  const int64_t warp =
      static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int64_t row = warp * kRowsPerWarp + lane / kLanesPerRow;
  const int part = lane % kLanesPerRow;
  const bool in_range = row < rows;  // no early return: the shuffles below need the whole warp
  const int64_t bh = row / T_pad;
  const int t = static_cast<int>(row % T_pad);
  float sum = 0.f;
  if (in_range && t < T) {
    const int64_t b = bh / NH;
    const int h = static_cast<int>(bh % NH);
    // (B,T,NH,HS) == (B,T,C); this lane's 8 elements.
    const int64_t offset = ((b * T + t) * NH + h) * kHeadDim + part * 8;
    const int4 o_bits = *reinterpret_cast<const int4*>(out + offset);
    const int4 g_bits = *reinterpret_cast<const int4*>(dout + offset);
    const __nv_bfloat162* o = reinterpret_cast<const __nv_bfloat162*>(&o_bits);
    const __nv_bfloat162* g = reinterpret_cast<const __nv_bfloat162*>(&g_bits);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 of = __bfloat1622float2(o[k]);
      const float2 gf = __bfloat1622float2(g[k]);
      sum += of.x * gf.x + of.y * gf.y;
    }
  }
#pragma unroll
  for (int s = kLanesPerRow / 2; s > 0; s /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, s);
  if (in_range && part == 0) {
    dsum[row] = sum;
    lse2[row] = t < T ? lse[bh * T + t] * flash::kLog2e : INFINITY;
    if (t % kBlockM == 0) semaphores[row / kBlockM] = 0;
    if (row == 0) *work_counter = 0;
  }
  // The dQ accumulator holds HS floats per padded row (in another order): this lane zeroes 8.
  if (dq_accum != nullptr && in_range) {
    float4* zero = reinterpret_cast<float4*>(dq_accum + row * kHeadDim + part * 8);
    zero[0] = make_float4(0.f, 0.f, 0.f, 0.f);
    zero[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// dqkv[b, t, h*HS + d] = bf16(scale * dQ) from the fragment-ordered fp32 tiles of 64 rows (each
// 64 x 64 block of one at [block][j][thread] as float2, j = 2 * (column / 8 % 8) + row / 8 % 2),
// in packs of 8 columns of a row: their 4 float2 are adjacent in the tile (threads 4r .. 4r + 3
// of one j), so a pack is read as 32 bytes and written as 16, and the HS/8 packs of a row write
// it whole (full sectors both ways). dq_pack_source: where pack `pack` of row `row` of the tile
// at float `tile_offset` of the accumulator sits; dq_pack_bf16: its conversion. Launch 3 (racing
// mode) and the deterministic main kernel's converter warp (convert_dq) share both.
__device__ __forceinline__ const float4* dq_pack_source(const float* dq_accum,
                                                       int64_t tile_offset, int row, int pack) {
  const int block = pack / 8;
  const int j = 2 * (pack % 8) + (row / 8) % 2;
  const int first_thread = 32 * (row / 16) + 4 * (row % 8);
  return reinterpret_cast<const float4*>(dq_accum + tile_offset + (block * 16 + j) * 256 +
                                         2 * first_thread);
}

__device__ __forceinline__ int4 dq_pack_bf16(float4 lo, float4 hi, float scale) {
  __nv_bfloat162 packed[4] = {__floats2bfloat162_rn(lo.x * scale, lo.y * scale),
                              __floats2bfloat162_rn(lo.z * scale, lo.w * scale),
                              __floats2bfloat162_rn(hi.x * scale, hi.y * scale),
                              __floats2bfloat162_rn(hi.z * scale, hi.w * scale)};
  return *reinterpret_cast<const int4*>(packed);
}

// Launch 3 (racing mode): one thread a pack.
template <int kHeadDim>
__global__ void hopper_backward_write_dq_kernel(bf16* dqkv, const float* dq_accum, int T, int C,
                                                int NH, int num_dq_tiles, int64_t packs,
                                                float scale) {
  constexpr int kPacksPerRow = kHeadDim / 8;
  const int64_t i = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= packs) return;
  const int64_t padded_row = i / kPacksPerRow;  // (bh, m, row) flattened
  const int pack = static_cast<int>(i % kPacksPerRow);
  const int row = static_cast<int>(padded_row % kDqTileRows);
  const int64_t tile = padded_row / kDqTileRows;
  const int m = static_cast<int>(tile % num_dq_tiles);
  const int t = m * kDqTileRows + row;
  if (t >= T) return;
  const float4* source = dq_pack_source(dq_accum, tile * 64 * kHeadDim, row, pack);
  const float4 lo = source[0], hi = source[1];
  const int64_t bh = tile / num_dq_tiles;
  const int64_t b = bh / NH;
  const int h = static_cast<int>(bh % NH);
  *reinterpret_cast<int4*>(dqkv + (b * T + t) * 3 * C + h * kHeadDim + 8 * pack) =
      dq_pack_bf16(lo, hi, scale);
}

}  // namespace gpt2::gpu::hopper_backward
