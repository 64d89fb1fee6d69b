/**
 * @file layernorm_row.cuh
 * @brief One row of the packed LayerNorm forward, by one warp: the math layernorm.cu's packed
 *        kernel and layernorm_fp8.cu's share, so both give the same bits. Device code: include
 *        from .cu files only.
 *
 * layernorm_row_packed<T_, kPacksPerLane>(x, addend, residual_out, weight, bias, C, store):
 * lane l holds packs l, l + 32, ... of the row (16 bytes each, kPacksPerLane at most, which
 * sets the registers the row takes: up to kLayerNormMaxPacksPerLane) in registers. With addend
 * set, the row is first x + addend, each sum rounded once to T_ (as residual_forward rounds
 * it) and stored to residual_out. Then mean = E[row], rstd = 1 / sqrt(Var[row] + eps)
 * (biased, two passes over the registers), and for every pack p the lane calls store(p, y)
 * with y = (row - mean) rstd w + b, rounded to T_. Returns {mean, rstd} to every lane. C must
 * be a multiple of the pack and at most 32 kPacksPerLane packs; every pointer 16-byte aligned.
 * The bits do not depend on kPacksPerLane.
 */
#pragma once

#include "kernels/common/layernorm_eps.h"
#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {

constexpr int kLayerNormMaxPacksPerLane = 8;

struct RowStatistics {
  float mean, rstd;
};

template <typename T_, int kPacksPerLane = kLayerNormMaxPacksPerLane, typename Store>
__device__ __forceinline__ RowStatistics layernorm_row_packed(const T_* x, const T_* addend,
                                                              T_* residual_out, const T_* weight,
                                                              const T_* bias, int C,
                                                              Store&& store) {
  constexpr int kPack = Pack16<T_>::kSize;
  constexpr float kEps = static_cast<float>(kLayerNormEps);
  const int lane = threadIdx.x % 32;
  const int packs = C / kPack;
  static_assert(kPacksPerLane >= 1 && kPacksPerLane <= kLayerNormMaxPacksPerLane);
  Pack16<T_> xs[kPacksPerLane];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPacksPerLane; ++i) {
    const int p = lane + 32 * i;
    if (p < packs) {
      xs[i] = load_pack16(x + p * kPack);
      if (addend != nullptr) {
        const Pack16<T_> a = load_pack16(addend + p * kPack);
#pragma unroll
        for (int j = 0; j < kPack; ++j)
          xs[i].values[j] = from_float<T_>(to_float(xs[i].values[j]) + to_float(a.values[j]));
        store_pack16(residual_out + p * kPack, xs[i]);
      }
#pragma unroll
      for (int j = 0; j < kPack; ++j) sum += to_float(xs[i].values[j]);
    }
  }
  const float row_mean = warp_reduce_sum(sum) / C;
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kPacksPerLane; ++i) {
    if (lane + 32 * i < packs) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) {
        const float d = to_float(xs[i].values[j]) - row_mean;
        sum_sq += d * d;
      }
    }
  }
  const float row_rstd = 1.0f / sqrtf(warp_reduce_sum(sum_sq) / C + kEps);
#pragma unroll
  for (int i = 0; i < kPacksPerLane; ++i) {
    const int p = lane + 32 * i;
    if (p < packs) {
      const Pack16<T_> w = load_pack16(weight + p * kPack);
      const Pack16<T_> b = load_pack16(bias + p * kPack);
      Pack16<T_> result;
#pragma unroll
      for (int j = 0; j < kPack; ++j) {
        const float norm = (to_float(xs[i].values[j]) - row_mean) * row_rstd;
        result.values[j] = from_float<T_>(norm * to_float(w.values[j]) + to_float(b.values[j]));
      }
      store(p, result);
    }
  }
  return {row_mean, row_rstd};
}

}  // namespace gpt2::gpu
