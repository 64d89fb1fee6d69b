/**
 * @file attention_flash_forward.cu
 * @brief Flash-attention forward, bf16 tensor cores (FlashAttention-2 scheme).
 *
 * out (B,T,C) and lse (B,NH,T) from qkv (B,T,3C); causal; CPU twin:
 * cpu::attention_flash_forward (kernels/cpu/attention_flash.cpp).
 * Parallel scheme: one thread block per (query block of kBlockM = 16*kNumWarps rows, b, h),
 * query blocks launched last-first (they have the most key blocks). Each warp owns 16 query
 * rows: Q stays in registers as A fragments; K/V tiles of kBlockN keys stream through shared
 * memory, double-buffered with cp.async. Per key tile: S = Q K^T (mma, fp32), scale and causal
 * mask, the online softmax in the log2 domain (running max m, running sum l, both per row, the
 * sum kept per thread and reduced over the quad at the end), O = O * exp2(m_old - m_new) + P V
 * with P fed from registers. Key tiles entirely above the diagonal are never loaded.
 * lse = m * ln2 + ln(l) (natural log, fp32). Precondition: C % 8 == 0 (16-byte rows).
 */
#include "kernels/gpu/attention.cuh"

#include <cmath>

#include "base/error.h"
#include "kernels/gpu/attention_flash_tiles.cuh"

namespace gpt2::gpu {
namespace {

using bf16 = __nv_bfloat16;

struct FlashForwardParams {
  const bf16* qkv;
  bf16* out;
  float* lse;
  int T, C, NH;
  float scale_log2;  // softmax scale * log2(e)
};

template <int kHeadDim_, int kNumWarps_, int kBlockN_>
struct FlashForwardTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kNumWarps = kNumWarps_;
  static constexpr int kThreads = 32 * kNumWarps;
  static constexpr int kBlockM = 16 * kNumWarps;  // query rows per block, 16 per warp
  static constexpr int kBlockN = kBlockN_;        // keys per K/V tile
  static constexpr int kRowChunks = kHeadDim / 8;
  static constexpr int kTileQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kTileKVBytes = kBlockN * kHeadDim * 2;
  static constexpr int kSmemBytes = kTileQBytes + 2 * 2 * kTileKVBytes;  // Q + 2 stages of K, V
  static_assert(kHeadDim % 16 == 0 && kBlockN % 16 == 0, "tiles are built of 16x16 MMA blocks");
};

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, 2)
    flash_forward_kernel(const FlashForwardParams p) {
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kThreads = Traits::kThreads;
  constexpr int kRowChunks = Traits::kRowChunks;
  constexpr int kDimTiles = kHeadDim / 8;  // 8-column n-tiles of O
  constexpr int kKeyTiles = kBlockN / 8;   // 8-column n-tiles of S

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t q_tile = mma::smem_addr(smem);
  const uint32_t k_tiles = q_tile + Traits::kTileQBytes;
  const uint32_t v_tiles = k_tiles + 2 * Traits::kTileKVBytes;

  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int T = p.T;

  const flash::BlockHead<kHeadDim> head(p.qkv, T, p.C, p.NH);
  const int64_t row_stride = head.qkv_stride;
  const bf16 *q_base = head.q_base, *k_base = head.k_base, *v_base = head.v_base;

  const int m0 = m_block * kBlockM;
  const int warp_row0 = m0 + warp * 16;
  const int key_end = min(T, m0 + kBlockM);  // causal: no key beyond the block's last query
  const int n_blocks = (key_end + kBlockN - 1) / kBlockN;

  flash::load_head_tile_async<kBlockM, kHeadDim, kThreads>(q_tile, q_base, row_stride, m0, T,
                                                           tid);
  flash::load_head_tile_async<kBlockN, kHeadDim, kThreads>(k_tiles, k_base, row_stride, 0, T,
                                                           tid);
  flash::load_head_tile_async<kBlockN, kHeadDim, kThreads>(v_tiles, v_base, row_stride, 0, T,
                                                           tid);
  mma::cp_async_commit();

  // Thread (g = lane/4, t = lane%4) holds rows warp_row0 + g and + g + 8 (index r = 0, 1) and,
  // in every 8-column tile, columns 2t and 2t+1.
  const int g = lane / 4;
  const int col_pair = 2 * (lane % 4);
  float o_acc[kDimTiles][4];
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d) o_acc[d][0] = o_acc[d][1] = o_acc[d][2] = o_acc[d][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // log2 domain
  float row_sum[2] = {0.f, 0.f};              // this thread's share; quad-reduced at the end
  uint32_t q_frag[kHeadDim / 16][4];

  for (int n = 0; n < n_blocks; ++n) {
    const int stage = n & 1;
    if (n + 1 < n_blocks) {
      const uint32_t next = (stage ^ 1) * Traits::kTileKVBytes;
      flash::load_head_tile_async<kBlockN, kHeadDim, kThreads>(k_tiles + next, k_base, row_stride,
                                                               (n + 1) * kBlockN, T, tid);
      flash::load_head_tile_async<kBlockN, kHeadDim, kThreads>(v_tiles + next, v_base, row_stride,
                                                               (n + 1) * kBlockN, T, tid);
    }
    mma::cp_async_commit();
    mma::cp_async_wait<1>();
    __syncthreads();

    if (n == 0) {
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk)
        flash::load_a_fragment<kRowChunks>(q_frag[kk], q_tile, warp * 16, kk, lane);
    }
    const uint32_t k_tile = k_tiles + stage * Traits::kTileKVBytes;
    const uint32_t v_tile = v_tiles + stage * Traits::kTileKVBytes;

    // S = Q K^T for this warp's 16 rows x kBlockN keys.
    float s[kKeyTiles][4];
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
#pragma unroll
      for (int nn = 0; nn < kBlockN / 16; ++nn) {
        uint32_t k_frag[4];
        flash::load_b_fragments_nk<kRowChunks>(k_frag, k_tile, nn * 16, kk, lane);
        flash::mma_two_n_tiles(s + 2 * nn, q_frag[kk], k_frag);
      }
    }

    // Scale into the log2 domain; mask keys after the query (causal) and at or past T.
    const int n0 = n * kBlockN;
    const bool needs_mask = (n0 + kBlockN - 1 > warp_row0) || (n0 + kBlockN > T);
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[j][e] * p.scale_log2;
        if (needs_mask) {
          const int key = n0 + j * 8 + col_pair + (e & 1);
          const int row = warp_row0 + g + (e >= 2 ? 8 : 0);
          if (key > row || key >= T) v = -INFINITY;
        }
        s[j][e] = v;
      }
    }

    // Online softmax: new running max, rescale what was accumulated, exponentiate.
    float tile_max[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
      tile_max[0] = fmaxf(tile_max[0], fmaxf(s[j][0], s[j][1]));
      tile_max[1] = fmaxf(tile_max[1], fmaxf(s[j][2], s[j][3]));
    }
    float shift[2];
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      shift[r] = tile_max[r] == -INFINITY ? 0.f : tile_max[r];  // a row with nothing seen yet
      correction[r] = exp2f(row_max[r] - shift[r]);
      row_max[r] = tile_max[r];
    }
    float tile_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
      s[j][0] = exp2f(s[j][0] - shift[0]);
      s[j][1] = exp2f(s[j][1] - shift[0]);
      s[j][2] = exp2f(s[j][2] - shift[1]);
      s[j][3] = exp2f(s[j][3] - shift[1]);
      tile_sum[0] += s[j][0] + s[j][1];
      tile_sum[1] += s[j][2] + s[j][3];
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) row_sum[r] = row_sum[r] * correction[r] + tile_sum[r];
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      o_acc[d][0] *= correction[0];
      o_acc[d][1] *= correction[0];
      o_acc[d][2] *= correction[1];
      o_acc[d][3] *= correction[1];
    }

    // O += P V, P straight from the S accumulators.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t p_frag[4];
      flash::accumulators_to_a_fragment(p_frag, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int dd = 0; dd < kHeadDim / 16; ++dd) {
        uint32_t v_frag[4];
        flash::load_b_fragments_kn<kRowChunks>(v_frag, v_tile, kk * 16, dd, lane);
        flash::mma_two_n_tiles(o_acc + 2 * dd, p_frag, v_frag);
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }

  // Epilogue: normalize, write O (bf16) and lse (fp32).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    const int row = warp_row0 + g + 8 * r;
    if (row < T) {
      const float inv_sum = 1.f / row_sum[r];
      bf16* out_row = p.out + (static_cast<int64_t>(head.b) * T + row) * p.C + head.h * kHeadDim;
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        *reinterpret_cast<__nv_bfloat162*>(out_row + d * 8 + col_pair) =
            __floats2bfloat162_rn(o_acc[d][2 * r] * inv_sum, o_acc[d][2 * r + 1] * inv_sum);
      }
      if (lane % 4 == 0) {
        const float m = row_max[r] == -INFINITY ? 0.f : row_max[r];
        p.lse[static_cast<int64_t>(head.bh) * T + row] = m * flash::kLn2 + logf(row_sum[r]);
      }
    }
  }
}

template <typename Traits>
void launch_flash_forward(const FlashForwardParams& params, int B, cudaStream_t stream) {
  const dim3 grid((params.T + Traits::kBlockM - 1) / Traits::kBlockM, B * params.NH);
  flash::launch_with_smem(flash_forward_kernel<Traits>, grid, Traits::kThreads,
                          Traits::kSmemBytes, params, stream);
}

}  // namespace

// The fp32 instantiation lives in attention_flash_simt.cu.
template <>
void attention_flash_forward<bf16>(bf16* out, float* lse, const bf16* qkv, int B, int T, int C,
                                   int NH, cudaStream_t stream) {
  const int head_size = flash::checked_head_size(B, T, C, NH);
  FlashForwardParams params{qkv, out, lse, T, C, NH,
                            static_cast<float>(1.0 / std::sqrt(double(head_size))) * flash::kLog2e};
  if (head_size == 64) {
    launch_flash_forward<FlashForwardTraits<64, 4, 64>>(params, B, stream);
  } else {
    launch_flash_forward<FlashForwardTraits<128, 4, 64>>(params, B, stream);
  }
}

}  // namespace gpt2::gpu
