/**
 * @file attention_flash_backward.cu
 * @brief Flash-attention backward, bf16 tensor cores (FlashAttention-2 scheme).
 *
 * dqkv (B,T,3C) (=) from dout (B,T,C), qkv, out and lse (B,NH,T); causal; CPU twin:
 * cpu::attention_flash_backward. Three launches:
 *  1. D[b,h,t] = sum_d dO * O (fp32), one warp per (b,t,h) row; the fp32 dQ buffer is zeroed.
 *  2. One thread block per (key block of kBlockN = 16*kNumWarps keys, b, h). K and V tiles
 *     stay in shared memory; the block walks the query blocks at or below the diagonal with Q
 *     and dO tiles double-buffered by cp.async. Each warp owns 16 keys and computes, for a query
 *     block, S^T = K Q^T, P^T = exp2(S^T scale log2e - lse log2e) (causal and T masks give 0),
 *     dP^T = V dO^T, dS^T = P^T (dP^T - D), then dV += P^T dO and dK += dS^T Q in registers.
 *     dS^T goes to shared memory as bf16 so the warps can form dQ_block = dS K, which is added
 *     to the fp32 dQ buffer with atomics (the additions from different key blocks race, so dQ is
 *     not bitwise reproducible run to run; all else is). dK * scale and dV are written at the end.
 *  3. dQ * scale converted to bf16 into dqkv's query part.
 * Nothing of size T x T exists. Scratch: B*NH*T floats for D, then B*T*C floats for dQ.
 * Precondition: C % 8 == 0.
 */
#include "kernels/gpu/attention.cuh"

#include <cmath>

#include "base/error.h"
#include "kernels/gpu/attention_flash_tiles.cuh"

namespace gpt2::gpu {
namespace {

using bf16 = __nv_bfloat16;

struct FlashBackwardParams {
  const bf16* qkv;
  const bf16* dout;
  const float* lse;
  const float* dsum;  // D (B,NH,T)
  float* dq_accum;    // (B,T,C) fp32, zeroed
  bf16* dqkv;
  int T, C, NH;
  float scale;       // 1/sqrt(HS)
  float scale_log2;  // scale * log2(e)
};

template <int kHeadDim_, int kNumWarps_, int kBlockM_>
struct FlashBackwardTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kNumWarps = kNumWarps_;
  static constexpr int kThreads = 32 * kNumWarps;
  static constexpr int kBlockN = 16 * kNumWarps;  // keys per block, 16 per warp
  static constexpr int kBlockM = kBlockM_;        // queries per step
  static constexpr int kRowChunks = kHeadDim / 8;
  static constexpr int kDsRowChunks = kBlockM / 8;
  static constexpr int kTileKVBytes = kBlockN * kHeadDim * 2;
  static constexpr int kTileQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kTileDsBytes = kBlockN * kBlockM * 2;
  // dQ of a query block: (kBlockM/16) m-tiles, each shared by kWarpsPerMTile warps that split
  // its kHeadDim/8 n-tiles.
  static constexpr int kMTiles = kBlockM / 16;
  static constexpr int kWarpsPerMTile = kNumWarps / kMTiles;
  static constexpr int kDqDimTiles = kHeadDim / 8 / kWarpsPerMTile;
  static constexpr int kSmemBytes = 2 * kTileKVBytes         // K, V
                                    + 2 * 2 * kTileQBytes    // Q, dO: 2 stages each
                                    + kTileDsBytes           // dS^T
                                    + 2 * 2 * kBlockM * 4;   // lse, D: 2 stages each
  // Unrolling the head-dim loop of S^T/dP^T lets ptxas hoist fragment loads; at head size
  // 128 that pushes the dK/dV accumulators (128 registers) into spills, so it stays rolled.
  static constexpr int kScoreUnroll = kHeadDim >= 128 ? 1 : kHeadDim / 16;
  static_assert(kBlockM % 16 == 0 && kNumWarps % kMTiles == 0, "dQ work must split evenly");
  static_assert((kHeadDim / 8) % kWarpsPerMTile == 0, "dQ n-tiles must split evenly");
};

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, 2)
    flash_backward_kernel(const FlashBackwardParams p) {
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kThreads = Traits::kThreads;
  constexpr int kRowChunks = Traits::kRowChunks;
  constexpr int kDimTiles = kHeadDim / 8;
  constexpr int kQueryTiles = kBlockM / 8;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t k_tile = mma::smem_addr(smem);
  const uint32_t v_tile = k_tile + Traits::kTileKVBytes;
  const uint32_t q_tiles = v_tile + Traits::kTileKVBytes;
  const uint32_t do_tiles = q_tiles + 2 * Traits::kTileQBytes;
  const uint32_t ds_tile = do_tiles + 2 * Traits::kTileQBytes;
  float* lse_smem = reinterpret_cast<float*>(smem + 2 * Traits::kTileKVBytes +
                                             4 * Traits::kTileQBytes + Traits::kTileDsBytes);
  float* dsum_smem = lse_smem + 2 * kBlockM;

  const int n_block = blockIdx.x;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int T = p.T;

  const flash::BlockHead<kHeadDim> head(p.qkv, T, p.C, p.NH);
  const int64_t qkv_stride = head.qkv_stride;
  const bf16 *q_base = head.q_base, *k_base = head.k_base, *v_base = head.v_base;
  const bf16* do_base = p.dout + static_cast<int64_t>(head.b) * T * p.C + head.h * kHeadDim;
  const float* lse_row = p.lse + static_cast<int64_t>(head.bh) * T;
  const float* dsum_row = p.dsum + static_cast<int64_t>(head.bh) * T;

  const int n0 = n_block * kBlockN;
  const int m_begin = n0 / kBlockM;  // first query block holding a query >= n0
  const int m_end = (T + kBlockM - 1) / kBlockM;

  flash::load_head_tile_async<kBlockN, kHeadDim, kThreads>(k_tile, k_base, qkv_stride, n0, T, tid);
  flash::load_head_tile_async<kBlockN, kHeadDim, kThreads>(v_tile, v_base, qkv_stride, n0, T, tid);
  flash::load_head_tile_async<kBlockM, kHeadDim, kThreads>(q_tiles, q_base, qkv_stride,
                                                           m_begin * kBlockM, T, tid);
  flash::load_head_tile_async<kBlockM, kHeadDim, kThreads>(do_tiles, do_base, p.C,
                                                           m_begin * kBlockM, T, tid);
  mma::cp_async_commit();

  const int g = lane / 4;
  const int col_pair = 2 * (lane % 4);
  const int warp_key0 = n0 + warp * 16;  // this thread's keys: warp_key0 + g, + g + 8
  float dk_acc[kDimTiles][4];
  float dv_acc[kDimTiles][4];
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[d][e] = dv_acc[d][e] = 0.f;
  }

  for (int m = m_begin; m < m_end; ++m) {
    const int stage = (m - m_begin) & 1;
    if (m + 1 < m_end) {
      const int next = stage ^ 1;
      flash::load_head_tile_async<kBlockM, kHeadDim, kThreads>(
          q_tiles + next * Traits::kTileQBytes, q_base, qkv_stride, (m + 1) * kBlockM, T, tid);
      flash::load_head_tile_async<kBlockM, kHeadDim, kThreads>(
          do_tiles + next * Traits::kTileQBytes, do_base, p.C, (m + 1) * kBlockM, T, tid);
    }
    mma::cp_async_commit();
    const int m0 = m * kBlockM;
    float* lse_s = lse_smem + stage * kBlockM;
    float* dsum_s = dsum_smem + stage * kBlockM;
    for (int i = tid; i < kBlockM; i += kThreads) {
      const bool valid = m0 + i < T;
      lse_s[i] = valid ? lse_row[m0 + i] * flash::kLog2e : 0.f;
      dsum_s[i] = valid ? dsum_row[m0 + i] : 0.f;
    }
    mma::cp_async_wait<1>();
    __syncthreads();
    const uint32_t q_tile = q_tiles + stage * Traits::kTileQBytes;
    const uint32_t do_tile = do_tiles + stage * Traits::kTileQBytes;

    // S^T = K Q^T and dP^T = V dO^T: this warp's 16 keys x kBlockM queries.
    float pt[kQueryTiles][4];
    float dpt[kQueryTiles][4];
#pragma unroll
    for (int j = 0; j < kQueryTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) pt[j][e] = dpt[j][e] = 0.f;
    }
    flash::mma_pair_loop<kHeadDim / 16, kBlockM / 16, Traits::kScoreUnroll>(
        pt, dpt,
        [&](int kk, uint32_t(&k_frag)[4], uint32_t(&v_frag)[4]) {
          flash::load_a_fragment<kRowChunks>(k_frag, k_tile, warp * 16, kk, lane);
          flash::load_a_fragment<kRowChunks>(v_frag, v_tile, warp * 16, kk, lane);
        },
        [&](int kk, int nn, uint32_t(&q_frag)[4], uint32_t(&do_frag)[4]) {
          flash::load_b_fragments_nk<kRowChunks>(q_frag, q_tile, nn * 16, kk, lane);
          flash::load_b_fragments_nk<kRowChunks>(do_frag, do_tile, nn * 16, kk, lane);
        });

    // P^T from the saved lse (0 above the diagonal and for queries past T); dS^T = P^T (dP^T - D).
#pragma unroll
    for (int j = 0; j < kQueryTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = j * 8 + col_pair + (e & 1);
        const int query = m0 + col;
        const int key = warp_key0 + g + (e >= 2 ? 8 : 0);
        const float prob = (key > query || query >= T)
                               ? 0.f
                               : exp2f(pt[j][e] * p.scale_log2 - lse_s[col]);
        pt[j][e] = prob;
        dpt[j][e] = prob * (dpt[j][e] - dsum_s[col]);
      }
    }

    // dV += P^T dO and dK += dS^T Q (A operands straight from the accumulators).
    flash::mma_pair_loop<kBlockM / 16, kHeadDim / 16, kBlockM / 16>(
        dv_acc, dk_acc,
        [&](int kk, uint32_t(&p_frag)[4], uint32_t(&ds_frag)[4]) {
          flash::accumulators_to_a_fragment(p_frag, pt[2 * kk], pt[2 * kk + 1]);
          flash::accumulators_to_a_fragment(ds_frag, dpt[2 * kk], dpt[2 * kk + 1]);
        },
        [&](int kk, int dd, uint32_t(&do_frag)[4], uint32_t(&q_frag)[4]) {
          flash::load_b_fragments_kn<kRowChunks>(do_frag, do_tile, kk * 16, dd, lane);
          flash::load_b_fragments_kn<kRowChunks>(q_frag, q_tile, kk * 16, dd, lane);
        });

    // dS^T (bf16) to shared memory, rows = this block's keys, columns = the block's queries.
#pragma unroll
    for (int j = 0; j < kQueryTiles; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = warp * 16 + g + 8 * r;
        const uint32_t addr =
            ds_tile + mma::swizzled_offset<Traits::kDsRowChunks>(row, j) + col_pair * 2;
        const uint32_t value = mma::pack_bf16x2(dpt[j][2 * r], dpt[j][2 * r + 1]);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(value));
      }
    }
    __syncthreads();

    // dQ_block = dS K: warp -> (m-tile, range of head-dim n-tiles); added to the fp32 buffer.
    {
      const int m_tile = warp / Traits::kWarpsPerMTile;
      const int dim_tile0 = (warp % Traits::kWarpsPerMTile) * Traits::kDqDimTiles;
      float dq_acc[Traits::kDqDimTiles][4];
#pragma unroll
      for (int d = 0; d < Traits::kDqDimTiles; ++d) {
#pragma unroll
        for (int e = 0; e < 4; ++e) dq_acc[d][e] = 0.f;
      }
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t ds_frag[4];
        flash::load_a_fragment_transposed<Traits::kDsRowChunks>(ds_frag, ds_tile, m_tile * 16,
                                                                kk * 16, lane);
#pragma unroll
        for (int dd = 0; dd < Traits::kDqDimTiles / 2; ++dd) {
          uint32_t k_frag[4];
          flash::load_b_fragments_kn<kRowChunks>(k_frag, k_tile, kk * 16, dim_tile0 / 2 + dd,
                                                 lane);
          flash::mma_two_n_tiles(dq_acc + 2 * dd, ds_frag, k_frag);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int query = m0 + m_tile * 16 + g + 8 * r;
        if (query < T) {
          float* dq_row =
              p.dq_accum + (static_cast<int64_t>(head.b) * T + query) * p.C + head.h * kHeadDim;
#pragma unroll
          for (int d = 0; d < Traits::kDqDimTiles; ++d) {
            atomicAdd(dq_row + (dim_tile0 + d) * 8 + col_pair, dq_acc[d][2 * r]);
            atomicAdd(dq_row + (dim_tile0 + d) * 8 + col_pair + 1, dq_acc[d][2 * r + 1]);
          }
        }
      }
    }
    __syncthreads();  // dS^T and this Q/dO stage are overwritten next
  }

  // dK = scale * dS^T Q and dV, for this thread's two keys.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = warp_key0 + g + 8 * r;
    if (key < T) {
      bf16* dk_row = p.dqkv + (static_cast<int64_t>(head.b) * T + key) * qkv_stride + p.C +
                     head.h * kHeadDim;
      bf16* dv_row = dk_row + p.C;
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        *reinterpret_cast<__nv_bfloat162*>(dk_row + d * 8 + col_pair) = __floats2bfloat162_rn(
            dk_acc[d][2 * r] * p.scale, dk_acc[d][2 * r + 1] * p.scale);
        *reinterpret_cast<__nv_bfloat162*>(dv_row + d * 8 + col_pair) =
            __floats2bfloat162_rn(dv_acc[d][2 * r], dv_acc[d][2 * r + 1]);
      }
    }
  }
}

// D[b,h,t] = sum_d dO[b,t,h,d] * O[b,t,h,d]; one warp per (b, t, h) row.
template <int kHeadDim>
__global__ void flash_backward_dsum_kernel(float* dsum, const bf16* dout, const bf16* out, int B,
                                           int T, int NH) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<int64_t>(B) * T * NH) return;
  const int h = static_cast<int>(row % NH);
  const int64_t bt = row / NH;
  const int64_t offset = row * kHeadDim;  // (B,T,NH,HS) == (B,T,C)
  float sum = 0.f;
  for (int d = 2 * lane; d < kHeadDim; d += 64) {
    const float2 o = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(out + offset + d));
    const float2 g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dout + offset + d));
    sum += o.x * g.x + o.y * g.y;
  }
#pragma unroll
  for (int s = 16; s > 0; s /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, s);
  if (lane == 0) {
    const int64_t b = bt / T;
    const int64_t t = bt % T;
    dsum[(b * NH + h) * T + t] = sum;
  }
}

// dqkv[b,t,0:C] = bf16(scale * dQ[b,t,:]).
__global__ void flash_backward_write_dq_kernel(bf16* dqkv, const float* dq_accum, int64_t rows,
                                               int C, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // pair index
  const int64_t pairs_per_row = C / 2;
  if (i >= rows * pairs_per_row) return;
  const int64_t row = i / pairs_per_row;
  const int64_t c = 2 * (i % pairs_per_row);
  const float2 v = *reinterpret_cast<const float2*>(dq_accum + row * C + c);
  *reinterpret_cast<__nv_bfloat162*>(dqkv + row * 3 * C + c) =
      __floats2bfloat162_rn(v.x * scale, v.y * scale);
}

template <typename Traits>
void launch_flash_backward(const FlashBackwardParams& params, int B, cudaStream_t stream) {
  const dim3 grid((params.T + Traits::kBlockN - 1) / Traits::kBlockN, B * params.NH);
  flash::launch_with_smem(flash_backward_kernel<Traits>, grid, Traits::kThreads,
                          Traits::kSmemBytes, params, stream);
}

// D first, then the fp32 dQ, which starts 16-byte aligned (its float2 reads need 8): B*NH*T
// is odd for e.g. gpt2-xl's 25 heads at B = 1 and odd T.
size_t dq_accum_offset_floats(int B, int T, int NH) {
  return (static_cast<size_t>(B) * NH * T + 3) / 4 * 4;
}

}  // namespace

size_t attention_flash_scratch_floats(int B, int T, int C, int NH) {
  return dq_accum_offset_floats(B, T, NH) + static_cast<size_t>(B) * T * C;
}

// The fp32 instantiation lives in attention_flash_simt.cu.
template <>
void attention_flash_backward<bf16>(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                                    const float* lse, int B, int T, int C, int NH, float* scratch,
                                    cudaStream_t stream) {
  const int head_size = flash::checked_head_size(B, T, C, NH);
  float* dsum = scratch;
  float* dq_accum = scratch + dq_accum_offset_floats(B, T, NH);
  const int64_t rows = static_cast<int64_t>(B) * T;

  GPT2_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, sizeof(float) * rows * C, stream));
  const int64_t dsum_rows = rows * NH;
  const int warps_per_block = 8;
  const unsigned dsum_blocks = static_cast<unsigned>((dsum_rows + warps_per_block - 1) / warps_per_block);
  if (head_size == 64) {
    flash_backward_dsum_kernel<64><<<dsum_blocks, 32 * warps_per_block, 0, stream>>>(
        dsum, dout, out, B, T, NH);
  } else {
    flash_backward_dsum_kernel<128><<<dsum_blocks, 32 * warps_per_block, 0, stream>>>(
        dsum, dout, out, B, T, NH);
  }
  GPT2_CUDA_CHECK_LAUNCH();

  const float scale = static_cast<float>(1.0 / std::sqrt(double(head_size)));
  FlashBackwardParams params{qkv, dout, lse, dsum, dq_accum, dqkv, T, C, NH, scale,
                             scale * flash::kLog2e};
  if (head_size == 64) {
    launch_flash_backward<FlashBackwardTraits<64, 4, 64>>(params, B, stream);
  } else {
    launch_flash_backward<FlashBackwardTraits<128, 4, 16>>(params, B, stream);
  }

  const int64_t pairs = rows * (C / 2);
  const int threads = 256;
  flash_backward_write_dq_kernel<<<static_cast<unsigned>((pairs + threads - 1) / threads), threads,
                                   0, stream>>>(dqkv, dq_accum, rows, C, scale);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt2::gpu
