/**
 * @file attention_hopper_softmax.cuh
 * @brief The online softmax of the Hopper flash-attention forward, one thread's part of it
 *        (device code; include from .cu files).
 *
 * OnlineSoftmax<kSRegs>: a thread's two rows of the scores (r = 0: accumulators i with
 * i % 4 < 2, r = 1: the others; hopper::AccumulatorLayout) over key tiles held as wgmma
 * accumulators s[kSRegs], in the log2 domain with the softmax scale folded into one FMA:
 *  - first(s): the row maxima over the tile (the quad's four lanes share a row), then
 *    s = exp2(s scale_log2 - max scale_log2) in place and the row sums of this thread's columns;
 *  - next(s, correction): the maxima over the new tile too, correction[r] = exp2((old max -
 *    new max) scale_log2) (what the sums so far, and O, are multiplied by), the exponentials
 *    and the sums as above, added to the corrected ones;
 *  - total(r): row r's sum over the quad; lse(r, total): its log-sum-exp, natural log.
 * Maxima are of the raw scores (a positive scale keeps their order); exp2 is ex2.approx.
 */
#pragma once

#include <cmath>

#include "kernels/gpu/attention_flash_common.cuh"
#include "kernels/gpu/attention_hopper_tiles.cuh"

namespace gpt2::gpu::hopper {

template <int kSRegs>
struct OnlineSoftmax {
  float scale_log2;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};  // this thread's columns only (total() adds the quad's)

  __device__ __forceinline__ explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {}

  __device__ __forceinline__ void first(float (&s)[kSRegs]) {
    row_max[0] = row_max[1] = -INFINITY;
    tile_max(s, row_max);
    exponentiate(s, row_sum);
  }

  __device__ __forceinline__ void next(float (&s)[kSRegs], float (&correction)[2]) {
    float new_max[2] = {row_max[0], row_max[1]};
    tile_max(s, new_max);
    correction[0] = exp2_approx((row_max[0] - new_max[0]) * scale_log2);
    correction[1] = exp2_approx((row_max[1] - new_max[1]) * scale_log2);
    row_max[0] = new_max[0];
    row_max[1] = new_max[1];
    float tile_sum[2];
    exponentiate(s, tile_sum);
    row_sum[0] = row_sum[0] * correction[0] + tile_sum[0];
    row_sum[1] = row_sum[1] * correction[1] + tile_sum[1];
  }

  __device__ __forceinline__ float total(int r) const {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    return sum;
  }

  __device__ __forceinline__ float lse(int r, float total_sum) const {
    return row_max[r] * scale_log2 * flash::kLn2 + logf(total_sum);
  }

 private:
  /// m[r] = max(m[r], row r's scores in s), over the quad.
  __device__ __forceinline__ static void tile_max(const float (&s)[kSRegs], float (&m)[2]) {
#pragma unroll
    for (int i = 0; i < kSRegs; i += 4) {
      m[0] = fmaxf(m[0], fmaxf(s[i + 0], s[i + 1]));
      m[1] = fmaxf(m[1], fmaxf(s[i + 2], s[i + 3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], 1));
      m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], 2));
    }
  }

  /// s = exp2(s scale_log2 - row_max scale_log2) in place; tile_sum = this thread's row sums.
  __device__ __forceinline__ void exponentiate(float (&s)[kSRegs], float (&tile_sum)[2]) const {
    const float shift0 = row_max[0] * scale_log2;
    const float shift1 = row_max[1] * scale_log2;
    tile_sum[0] = tile_sum[1] = 0.f;
#pragma unroll
    for (int i = 0; i < kSRegs; i += 4) {
      s[i + 0] = exp2_approx(fmaf(s[i + 0], scale_log2, -shift0));
      s[i + 1] = exp2_approx(fmaf(s[i + 1], scale_log2, -shift0));
      s[i + 2] = exp2_approx(fmaf(s[i + 2], scale_log2, -shift1));
      s[i + 3] = exp2_approx(fmaf(s[i + 3], scale_log2, -shift1));
      tile_sum[0] += s[i + 0] + s[i + 1];
      tile_sum[1] += s[i + 2] + s[i + 3];
    }
  }
};

}  // namespace gpt2::gpu::hopper
