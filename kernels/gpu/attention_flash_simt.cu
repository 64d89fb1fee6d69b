/**
 * @file attention_flash_simt.cu
 * @brief Flash attention in plain fp32 (no tensor cores): the --precision fp32 path.
 *
 * Same contract as the bf16 kernels (kernels/gpu/attention.cuh) and the same algorithm as
 * cpu::attention_flash_forward/backward, with exact fp32 arithmetic and no atomics, so results
 * are bitwise reproducible. A group of kGroup = HS/32 consecutive lanes owns one row (query or
 * key), each lane 32 of its channels; dot products are reduced across the group by shuffles.
 *  forward: a block of 128 threads owns 128/kGroup queries; key/value tiles of kTileRows rows go
 *    through shared memory; per key: s = q.k * scale, online softmax update, o += p v.
 *  backward: D = rowsum(dO O) (shared with the bf16 path's formula); then one kernel per key
 *    group (dK, dV: loop over the queries at or after the key) and one per query group
 *    (dQ: loop over the keys at or before the query), each recomputing p = exp(s - lse).
 * Throughput is SIMT fp32 (slow at long T); correctness and exactness are the point.
 */
#include "kernels/gpu/attention.cuh"

#include <cmath>

#include "base/error.h"
#include "kernels/gpu/attention_flash_tiles.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kThreads = 128;
constexpr int kTileRows = 32;
constexpr int kLaneDims = 32;  // channels per lane

template <int kGroup>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int s = 1; s < kGroup; s *= 2) v += __shfl_xor_sync(0xffffffffu, v, s);
  return v;
}

// The group's two dot products a.x and b.y over the head's channels, each lane adding its share.
template <int kGroup>
__device__ __forceinline__ void group_dot_pair(const float* a, const float* x, const float* b,
                                               const float* y, float* ax, float* by) {
  float sum_ax = 0.f, sum_by = 0.f;
#pragma unroll
  for (int d = 0; d < kLaneDims; ++d) {
    sum_ax += a[d] * x[d];
    sum_by += b[d] * y[d];
  }
  *ax = group_sum<kGroup>(sum_ax);
  *by = group_sum<kGroup>(sum_by);
}

// Rows [row0, row0 + kTileRows) of one head (row stride `stride` floats) into smem, 0 past T.
template <int kHeadDim>
__device__ __forceinline__ void load_tile(float* tile, const float* head_base, int64_t stride,
                                          int row0, int T) {
  for (int i = threadIdx.x; i < kTileRows * kHeadDim; i += blockDim.x) {
    const int r = i / kHeadDim;
    const int d = i % kHeadDim;
    tile[i] = row0 + r < T ? head_base[static_cast<int64_t>(row0 + r) * stride + d] : 0.f;
  }
}

// This thread's place: head (b, h) of blockIdx.y; its row (query or key, blockIdx.x's block of
// rows, one row per group of kGroup lanes); its share `part` of the head's channels; and the
// head's base in qkv (row stride 3C).
template <int kHeadDim>
struct RowGroup {
  static constexpr int kGroup = kHeadDim / kLaneDims;
  static constexpr int kRowsPerBlock = kThreads / kGroup;
  int bh, b, h, part, row0, row;
  int64_t stride;
  const float* q_base;
  __device__ RowGroup(const float* qkv, int T, int C, int NH)
      : bh(blockIdx.y), b(bh / NH), h(bh % NH), part(threadIdx.x % kGroup),
        row0(blockIdx.x * kRowsPerBlock), row(row0 + threadIdx.x / kGroup), stride(3LL * C),
        q_base(qkv + static_cast<int64_t>(b) * T * stride + h * kHeadDim) {}
  // This lane's share of channel d of the group's row in qkv's part `which` (0 q, 1 k, 2 v);
  // 0 past T.
  __device__ float own(int which, int d, int T, int C) const {
    return row < T ? q_base[static_cast<int64_t>(row) * stride + which * C + part * kLaneDims + d]
                   : 0.f;
  }
};

// Streams the head's keys [0, key_end) through shared memory, kTileRows at a time (0 past T),
// and calls visit(key, k_row, v_row) with this lane's share of each key's and value's channels.
template <int kHeadDim, typename Visit>
__device__ __forceinline__ void for_each_key(const RowGroup<kHeadDim>& g, int T, int C,
                                             int key_end, Visit visit) {
  __shared__ float k_tile[kTileRows * kHeadDim];
  __shared__ float v_tile[kTileRows * kHeadDim];
  for (int n0 = 0; n0 < key_end; n0 += kTileRows) {
    load_tile<kHeadDim>(k_tile, g.q_base + C, g.stride, n0, T);
    load_tile<kHeadDim>(v_tile, g.q_base + 2 * C, g.stride, n0, T);
    __syncthreads();
    for (int j = 0; j < kTileRows; ++j)
      visit(n0 + j, k_tile + j * kHeadDim + g.part * kLaneDims,
            v_tile + j * kHeadDim + g.part * kLaneDims);
    __syncthreads();
  }
}

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    flash_forward_simt_kernel(float* out, float* lse, const float* qkv, int T, int C, int NH,
                              float scale) {
  constexpr int kGroup = RowGroup<kHeadDim>::kGroup;
  const RowGroup<kHeadDim> g(qkv, T, C, NH);
  const int query = g.row;
  float q[kLaneDims];
  float o[kLaneDims];
#pragma unroll
  for (int d = 0; d < kLaneDims; ++d) {
    q[d] = g.own(0, d, T, C);
    o[d] = 0.f;
  }
  float row_max = -INFINITY;
  float row_sum = 0.f;
  const int key_end = min(T, g.row0 + RowGroup<kHeadDim>::kRowsPerBlock);
  for_each_key(g, T, C, key_end, [&](int key, const float* k_row, const float* v_row) {
    float dot = 0.f;
#pragma unroll
    for (int d = 0; d < kLaneDims; ++d) dot += q[d] * k_row[d];
    const float s = group_sum<kGroup>(dot) * scale;
    if (key <= query && key < T) {
      const float new_max = fmaxf(row_max, s);
      const float correction = expf(row_max - new_max);
      const float prob = expf(s - new_max);
      row_sum = row_sum * correction + prob;
#pragma unroll
      for (int d = 0; d < kLaneDims; ++d) o[d] = o[d] * correction + prob * v_row[d];
      row_max = new_max;
    }
  });
  if (query < T) {
    float* out_row = out + (static_cast<int64_t>(g.b) * T + query) * C + g.h * kHeadDim;
    const float inv_sum = 1.f / row_sum;
#pragma unroll
    for (int d = 0; d < kLaneDims; ++d) out_row[g.part * kLaneDims + d] = o[d] * inv_sum;
    if (g.part == 0) lse[static_cast<int64_t>(g.bh) * T + query] = row_max + logf(row_sum);
  }
}

// D[b,h,t] = sum_d dO O over one head's row; one group per row.
template <int kHeadDim>
__global__ void flash_dsum_simt_kernel(float* dsum, const float* dout, const float* out, int T,
                                       int C, int NH) {
  constexpr int kGroup = kHeadDim / kLaneDims;
  const int bh = blockIdx.y;
  const int b = bh / NH;
  const int h = bh % NH;
  const int part = threadIdx.x % kGroup;
  const int t = blockIdx.x * (kThreads / kGroup) + threadIdx.x / kGroup;
  float sum = 0.f;
  if (t < T) {
    const int64_t offset = (static_cast<int64_t>(b) * T + t) * C + h * kHeadDim + part * kLaneDims;
#pragma unroll
    for (int d = 0; d < kLaneDims; ++d) sum += dout[offset + d] * out[offset + d];
  }
  sum = group_sum<kGroup>(sum);
  if (t < T && part == 0) dsum[static_cast<int64_t>(bh) * T + t] = sum;
}

// dK, dV for one key per group: loop over queries >= key.
template <int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kv_simt_kernel(float* dqkv, const float* dout, const float* qkv,
                                  const float* lse, const float* dsum, int T, int C, int NH,
                                  float scale) {
  constexpr int kGroup = kHeadDim / kLaneDims;
  __shared__ float q_tile[kTileRows * kHeadDim];
  __shared__ float do_tile[kTileRows * kHeadDim];
  __shared__ float lse_tile[kTileRows];
  __shared__ float dsum_tile[kTileRows];

  const RowGroup<kHeadDim> g(qkv, T, C, NH);
  const int bh = g.bh, b = g.b, h = g.h, part = g.part, k0 = g.row0, key = g.row;
  const int64_t stride = g.stride;
  const float* q_base = g.q_base;
  const float* do_base = dout + static_cast<int64_t>(b) * T * C + h * kHeadDim;

  float k[kLaneDims], v[kLaneDims], dk[kLaneDims], dv[kLaneDims];
#pragma unroll
  for (int d = 0; d < kLaneDims; ++d) {
    k[d] = g.own(1, d, T, C);
    v[d] = g.own(2, d, T, C);
    dk[d] = dv[d] = 0.f;
  }
  for (int m0 = k0 / kTileRows * kTileRows; m0 < T; m0 += kTileRows) {
    load_tile<kHeadDim>(q_tile, q_base, stride, m0, T);
    load_tile<kHeadDim>(do_tile, do_base, C, m0, T);
    for (int i = threadIdx.x; i < kTileRows; i += blockDim.x) {
      lse_tile[i] = m0 + i < T ? lse[static_cast<int64_t>(bh) * T + m0 + i] : 0.f;
      dsum_tile[i] = m0 + i < T ? dsum[static_cast<int64_t>(bh) * T + m0 + i] : 0.f;
    }
    __syncthreads();
    for (int i = 0; i < kTileRows; ++i) {
      const float* q_row = q_tile + i * kHeadDim + part * kLaneDims;
      const float* do_row = do_tile + i * kHeadDim + part * kLaneDims;
      float qk, dov;
      group_dot_pair<kGroup>(q_row, k, do_row, v, &qk, &dov);
      const int query = m0 + i;
      if (query >= key && query < T && key < T) {
        const float prob = expf(qk * scale - lse_tile[i]);
        const float ds = prob * (dov - dsum_tile[i]);
#pragma unroll
        for (int d = 0; d < kLaneDims; ++d) {
          dv[d] += prob * do_row[d];
          dk[d] += ds * q_row[d];
        }
      }
    }
    __syncthreads();
  }
  if (key < T) {
    float* dk_row = dqkv + (static_cast<int64_t>(b) * T + key) * stride + C + h * kHeadDim +
                    part * kLaneDims;
#pragma unroll
    for (int d = 0; d < kLaneDims; ++d) {
      dk_row[d] = dk[d] * scale;
      dk_row[C + d] = dv[d];
    }
  }
}

// dQ for one query per group: loop over keys <= query.
template <int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    flash_backward_q_simt_kernel(float* dqkv, const float* dout, const float* qkv,
                                 const float* lse, const float* dsum, int T, int C, int NH,
                                 float scale) {
  constexpr int kGroup = RowGroup<kHeadDim>::kGroup;
  const RowGroup<kHeadDim> g(qkv, T, C, NH);
  const int bh = g.bh, b = g.b, h = g.h, part = g.part, query = g.row;
  float q[kLaneDims], dov[kLaneDims], dq[kLaneDims];
#pragma unroll
  for (int d = 0; d < kLaneDims; ++d) {
    q[d] = g.own(0, d, T, C);
    dov[d] = query < T ? dout[(static_cast<int64_t>(b) * T + query) * C + h * kHeadDim +
                              part * kLaneDims + d]
                       : 0.f;
    dq[d] = 0.f;
  }
  const float row_lse = query < T ? lse[static_cast<int64_t>(bh) * T + query] : 0.f;
  const float row_dsum = query < T ? dsum[static_cast<int64_t>(bh) * T + query] : 0.f;
  const int key_end = min(T, g.row0 + RowGroup<kHeadDim>::kRowsPerBlock);
  for_each_key(g, T, C, key_end, [&](int key, const float* k_row, const float* v_row) {
    float qk, dp;
    group_dot_pair<kGroup>(q, k_row, dov, v_row, &qk, &dp);
    if (key <= query && query < T) {
      const float ds = expf(qk * scale - row_lse) * (dp - row_dsum);
#pragma unroll
      for (int d = 0; d < kLaneDims; ++d) dq[d] += ds * k_row[d];
    }
  });
  if (query < T) {
    float* dq_row = dqkv + (static_cast<int64_t>(b) * T + query) * g.stride + h * kHeadDim +
                    part * kLaneDims;
#pragma unroll
    for (int d = 0; d < kLaneDims; ++d) dq_row[d] = dq[d] * scale;
  }
}

template <int kHeadDim>
dim3 row_grid(int B, int T, int NH) {
  constexpr int kRowsPerBlock = RowGroup<kHeadDim>::kRowsPerBlock;
  return dim3((T + kRowsPerBlock - 1) / kRowsPerBlock, B * NH);
}

template <int kHeadDim>
void flash_forward_simt(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                        cudaStream_t stream) {
  const float scale = static_cast<float>(1.0 / std::sqrt(double(kHeadDim)));
  flash_forward_simt_kernel<kHeadDim>
      <<<row_grid<kHeadDim>(B, T, NH), kThreads, 0, stream>>>(out, lse, qkv, T, C, NH, scale);
  GPT2_CUDA_CHECK_LAUNCH();
}

template <int kHeadDim>
void flash_backward_simt(float* dqkv, const float* dout, const float* qkv, const float* out,
                         const float* lse, int B, int T, int C, int NH, float* dsum,
                         cudaStream_t stream) {
  const float scale = static_cast<float>(1.0 / std::sqrt(double(kHeadDim)));
  const dim3 grid = row_grid<kHeadDim>(B, T, NH);
  flash_dsum_simt_kernel<kHeadDim><<<grid, kThreads, 0, stream>>>(dsum, dout, out, T, C, NH);
  GPT2_CUDA_CHECK_LAUNCH();
  flash_backward_kv_simt_kernel<kHeadDim>
      <<<grid, kThreads, 0, stream>>>(dqkv, dout, qkv, lse, dsum, T, C, NH, scale);
  GPT2_CUDA_CHECK_LAUNCH();
  flash_backward_q_simt_kernel<kHeadDim>
      <<<grid, kThreads, 0, stream>>>(dqkv, dout, qkv, lse, dsum, T, C, NH, scale);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <>
void attention_flash_forward<float>(float* out, float* lse, const float* qkv, int B, int T, int C,
                                    int NH, cudaStream_t stream) {
  if (flash::checked_head_size(B, T, C, NH) == 64) {
    flash_forward_simt<64>(out, lse, qkv, B, T, C, NH, stream);
  } else {
    flash_forward_simt<128>(out, lse, qkv, B, T, C, NH, stream);
  }
}

template <>
void attention_flash_backward<float>(float* dqkv, const float* dout, const float* qkv,
                                     const float* out, const float* lse, int B, int T, int C,
                                     int NH, float* scratch, cudaStream_t stream) {
  if (flash::checked_head_size(B, T, C, NH) == 64) {
    flash_backward_simt<64>(dqkv, dout, qkv, out, lse, B, T, C, NH, scratch, stream);
  } else {
    flash_backward_simt<128>(dqkv, dout, qkv, out, lse, B, T, C, NH, scratch, stream);
  }
}

}  // namespace gpt2::gpu
