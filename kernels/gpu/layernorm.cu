/**
 * @file layernorm.cu
 * @brief LayerNorm forward and backward (deterministic parameter gradients); see layernorm.cuh.
 *
 * norm is recomputed in backward as (x - mean) * rstd from the saved fp32 mean/rstd, with the
 * same expression in the row kernels and the column kernel, so both see the same values.
 * Row kernels come in two forms: packed (16-byte accesses, the row held in registers: one read
 * of each input; the backward also sums its chunk's parameter-gradient partials in the same pass)
 * when C and the pointers allow, scalar otherwise (the partials in a column kernel).
 */
#include "kernels/gpu/layernorm.cuh"

#include <initializer_list>

#include "base/error.h"
#include "kernels/common/layernorm_eps.h"
#include "kernels/gpu/common.cuh"
#include "kernels/gpu/layernorm_row.cuh"
#include "kernels/gpu/residual.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kRowThreads = 32 * kWarpsPerBlock;
/// Rows per chunk of the backward's parameter-gradient partials: the packed backward's block,
/// 8 rows per warp (bench/NOTES.md: layernorm backward chunks).
constexpr int kBackwardRowsPerChunk = 64;
constexpr float kEps = static_cast<float>(kLayerNormEps);

// ---------------------------------------------------------------------------------------------
// Kernels

/// One warp per row of inp (B*T rows of C).
template <typename T_>
__global__ void layernorm_forward_kernel(T_* out, float* mean, float* rstd, const T_* inp,
                                         const T_* weight, const T_* bias, int64_t rows, int C) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together, so the shuffles stay full-warp
  const T_* x = inp + row * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += to_float(x[c]);
  const float row_mean = warp_reduce_sum(sum) / C;
  float sum_sq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_float(x[c]) - row_mean;
    sum_sq += d * d;
  }
  const float row_rstd = 1.0f / sqrtf(warp_reduce_sum(sum_sq) / C + kEps);
  T_* y = out + row * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_float(x[c]) - row_mean) * row_rstd;
    y[c] = from_float<T_>(norm * to_float(weight[c]) + to_float(bias[c]));
  }
  if (lane == 0) {
    if (mean) mean[row] = row_mean;
    if (rstd) rstd[row] = row_rstd;
  }
}

/// dinp += ...: one warp per row.
template <typename T_>
__global__ void layernorm_backward_dinp_kernel(T_* dinp, const T_* dout, const T_* inp,
                                               const T_* weight, const float* mean,
                                               const float* rstd, int64_t rows, int C) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T_* x = inp + row * C;
  const T_* g = dout + row * C;
  const float row_mean = mean[row];
  const float row_rstd = rstd[row];
  float sum_dnorm = 0.0f;
  float sum_dnorm_norm = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_float(x[c]) - row_mean) * row_rstd;
    const float dnorm = to_float(g[c]) * to_float(weight[c]);
    sum_dnorm += dnorm;
    sum_dnorm_norm += dnorm * norm;
  }
  const float mean_dnorm = warp_reduce_sum(sum_dnorm) / C;
  const float mean_dnorm_norm = warp_reduce_sum(sum_dnorm_norm) / C;
  T_* dx = dinp + row * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_float(x[c]) - row_mean) * row_rstd;
    const float dnorm = to_float(g[c]) * to_float(weight[c]);
    const float grad = row_rstd * (dnorm - mean_dnorm - norm * mean_dnorm_norm);
    dx[c] = from_float<T_>(to_float(dx[c]) + grad);
  }
}

/// Per chunk of rows: partial_dweight[chunk, c] = sum dout norm, partial_dbias[chunk, c] =
/// sum dout, rows in order. Grid (chunks, ceil(C / blockDim.x)); thread = channel.
template <typename T_>
__global__ void layernorm_backward_partials_kernel(float* partial_dweight, float* partial_dbias,
                                                   const T_* dout, const T_* inp,
                                                   const float* mean, const float* rstd,
                                                   int64_t rows, int C) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t chunk = blockIdx.x;
  const int64_t row_begin = chunk * kBackwardRowsPerChunk;
  const int64_t row_end = min(row_begin + kBackwardRowsPerChunk, rows);
  float sum_dweight = 0.0f;
  float sum_dbias = 0.0f;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float norm = (to_float(inp[r * C + c]) - mean[r]) * rstd[r];
    const float g = to_float(dout[r * C + c]);
    sum_dweight += g * norm;
    sum_dbias += g;
  }
  partial_dweight[chunk * C + c] = sum_dweight;
  partial_dbias[chunk * C + c] = sum_dbias;
}

// Packed row kernels: one warp per row, the row held in registers as 16-byte packs (lane l owns
// packs l, l+32, ...), so x and dout are read from memory once and every access is 16 bytes.
// Used when C is a multiple of the pack size, the row fits kMaxPacksPerLane packs per lane, and
// every pointer is 16-byte aligned (the launchers check); otherwise the scalar kernels above.
constexpr int kMaxPacksPerLane = kLayerNormMaxPacksPerLane;

template <typename T_>
bool packed_rows_fit(int C, std::initializer_list<const void*> pointers) {
  constexpr int kPack = Pack16<T_>::kSize;
  if (C % kPack != 0 || C / kPack > 32 * kMaxPacksPerLane) return false;
  for (const void* p : pointers)
    if (p != nullptr && !is_aligned16(p)) return false;
  return true;
}

/// With `addend` set (residual_layernorm_forward) the row is first inp + addend, rounded to T_
/// as residual_forward rounds it and stored to residual_out; the normalization then reads those
/// very values from registers, so the pair's bits come out of one read of each input.
template <typename T_>
__global__ void layernorm_forward_packed_kernel(T_* out, float* mean, float* rstd, const T_* inp,
                                                const T_* weight, const T_* bias, int64_t rows,
                                                int C, const T_* addend, T_* residual_out) {
  constexpr int kPack = Pack16<T_>::kSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together
  T_* y = out + row * C;
  const bool residual = addend != nullptr;
  const RowStatistics stats = layernorm_row_packed(
      inp + row * C, residual ? addend + row * C : nullptr,
      residual ? residual_out + row * C : nullptr, weight, bias, C,
      [&](int p, const Pack16<T_>& result) { store_pack16(y + p * kPack, result); });
  if (threadIdx.x % 32 == 0) {
    if (mean) mean[row] = stats.mean;
    if (rstd) rstd[row] = stats.rstd;
  }
}

/// Hides a pack's value from the compiler, so that what is computed from it is recomputed after
/// this point instead of being kept live in registers since before it. Emits no instruction.
template <typename T_>
__device__ __forceinline__ void opaque_to_compiler(Pack16<T_>& pack) {
  int4& words = *reinterpret_cast<int4*>(&pack);
  asm volatile("" : "+r"(words.x), "+r"(words.y), "+r"(words.z), "+r"(words.w));
}

/// The packed backward, dinp and the parameter-gradient partials in one pass over dout and inp:
/// block = chunk of kBackwardRowsPerChunk rows (the partials' chunk), warp w takes the chunk's
/// rows w, w + kWarpsPerBlock, ...; lane l holds packs l, l + 32, ... (kPacksPerLane of them).
/// A row's x, dout and dinp are loaded together: one memory round trip a row. Each warp sums
/// dout * norm and dout over its rows for its lanes' channels in its own slice of shared memory
/// (8 warps x 2 C floats, dynamic; float4 slots laid out so that consecutive lanes touch
/// consecutive slots), not in registers, which leaves registers for two blocks an SM; after one
/// barrier a thread per channel adds the warps' sums in warp order into the chunk's partials.
/// (Rows of 7 or 8 packs a lane do not fit 128 registers a thread: one block an SM.)
template <typename T_, int kPacksPerLane>
__global__ void __launch_bounds__(kRowThreads, kPacksPerLane <= 6 ? 2 : 1)
    layernorm_backward_packed_kernel(T_* dinp, float* partial_dweight, float* partial_dbias,
                                     const T_* dout, const T_* inp, const T_* weight,
                                     const float* mean, const float* rstd, int64_t rows, int C) {
  constexpr int kPack = Pack16<T_>::kSize;
  constexpr int kQuads = kPack / 4;  // float4 slots of sums a pack
  extern __shared__ float4 warp_sums[];  // [warp]: [kQuads][packs] dweight, then the same dbias
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int packs = C / kPack;
  const int64_t chunk = blockIdx.x;
  const int64_t row_begin = chunk * kBackwardRowsPerChunk;
  const int64_t row_end = min(row_begin + kBackwardRowsPerChunk, rows);
  // Slot of (pack p, quad q) in a warp's dweight sums; its dbias sums are C / 4 slots later.
  auto slot = [packs](int p, int q) { return q * packs + p; };
  float4* dweight_sums = warp_sums + static_cast<size_t>(warp) * (C / 2);
  float4* dbias_sums = dweight_sums + C / 4;
#pragma unroll
  for (int i = 0; i < kPacksPerLane; ++i) {
    const int p = lane + 32 * i;
    if (p < packs) {
#pragma unroll
      for (int q = 0; q < kQuads; ++q) {
        dweight_sums[slot(p, q)] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        dbias_sums[slot(p, q)] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
  }

  for (int64_t row = row_begin + warp; row < row_end; row += kWarpsPerBlock) {
    const T_* x = inp + row * C;
    const T_* g = dout + row * C;
    T_* dx = dinp + row * C;
    const float row_mean = mean[row];
    const float row_rstd = rstd[row];
    Pack16<T_> xs[kPacksPerLane];
    Pack16<T_> gs[kPacksPerLane];
    Pack16<T_> ds[kPacksPerLane];
#pragma unroll
    for (int i = 0; i < kPacksPerLane; ++i) {
      const int p = lane + 32 * i;
      if (p < packs) {
        xs[i] = load_pack16(x + p * kPack);
        gs[i] = load_pack16(g + p * kPack);
        ds[i] = load_pack16(dx + p * kPack);
      }
    }
    float sum_dnorm = 0.0f;
    float sum_dnorm_norm = 0.0f;
#pragma unroll
    for (int i = 0; i < kPacksPerLane; ++i) {
      const int p = lane + 32 * i;
      if (p < packs) {
        const Pack16<T_> w = load_pack16(weight + p * kPack);  // L1-resident after the first
        float norms[kPack], grads[kPack];
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          norms[j] = (to_float(xs[i].values[j]) - row_mean) * row_rstd;
          grads[j] = to_float(gs[i].values[j]);
          const float dnorm = grads[j] * to_float(w.values[j]);
          sum_dnorm += dnorm;
          sum_dnorm_norm += dnorm * norms[j];
        }
#pragma unroll
        for (int q = 0; q < kQuads; ++q) {
          float4 sw = dweight_sums[slot(p, q)];
          float4 sb = dbias_sums[slot(p, q)];
          sw.x += grads[4 * q] * norms[4 * q];
          sw.y += grads[4 * q + 1] * norms[4 * q + 1];
          sw.z += grads[4 * q + 2] * norms[4 * q + 2];
          sw.w += grads[4 * q + 3] * norms[4 * q + 3];
          sb.x += grads[4 * q];
          sb.y += grads[4 * q + 1];
          sb.z += grads[4 * q + 2];
          sb.w += grads[4 * q + 3];
          dweight_sums[slot(p, q)] = sw;
          dbias_sums[slot(p, q)] = sb;
        }
      }
    }
    const float mean_dnorm = warp_reduce_sum(sum_dnorm) / C;
    const float mean_dnorm_norm = warp_reduce_sum(sum_dnorm_norm) / C;
#pragma unroll
    for (int i = 0; i < kPacksPerLane; ++i) {
      const int p = lane + 32 * i;
      if (p < packs) {
        // The same arithmetic as above, recomputed from the packs rather than kept as floats
        // across the reductions (which would double the registers the row takes).
        opaque_to_compiler(xs[i]);
        opaque_to_compiler(gs[i]);
        const Pack16<T_> w = load_pack16(weight + p * kPack);
        Pack16<T_> d = ds[i];
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          const float norm = (to_float(xs[i].values[j]) - row_mean) * row_rstd;
          const float dnorm = to_float(gs[i].values[j]) * to_float(w.values[j]);
          const float grad = row_rstd * (dnorm - mean_dnorm - norm * mean_dnorm_norm);
          d.values[j] = from_float<T_>(to_float(d.values[j]) + grad);
        }
        store_pack16(dx + p * kPack, d);
      }
    }
  }

  // One barrier, then a thread per channel adds the warps' sums in warp order: deterministic.
  __syncthreads();
  const float* sums = reinterpret_cast<const float*>(warp_sums);
  for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
    const bool is_bias = c >= C;
    const int channel = is_bias ? c - C : c;
    const int r = channel % kPack;
    const size_t at =
        (is_bias ? C : 0) + 4 * static_cast<size_t>(slot(channel / kPack, r / 4)) + r % 4;
    float total = sums[at];
#pragma unroll
    for (int w = 1; w < kWarpsPerBlock; ++w) total += sums[static_cast<size_t>(w) * 2 * C + at];
    if (is_bias) partial_dbias[chunk * C + channel] = total;
    else partial_dweight[chunk * C + channel] = total;
  }
}

template <typename T_, int kPacksPerLane>
void launch_layernorm_backward_packed(T_* dinp, float* partial_dweight, float* partial_dbias,
                                      const T_* dout, const T_* inp, const T_* weight,
                                      const float* mean, const float* rstd, int64_t rows, int C,
                                      int64_t chunks, cudaStream_t stream) {
  const size_t shared_bytes = kWarpsPerBlock * 2 * static_cast<size_t>(C) * sizeof(float);
  const auto kernel = layernorm_backward_packed_kernel<T_, kPacksPerLane>;
  if (shared_bytes > 48 * 1024)  // 8 warps x 2C floats: above the default from C = 769
    GPT2_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(shared_bytes)));
  kernel<<<static_cast<unsigned int>(chunks), kRowThreads, shared_bytes, stream>>>(
          dinp, partial_dweight, partial_dbias, dout, inp, weight, mean, rstd, rows, C);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

template <typename T_>
void layernorm_forward(T_* out, float* mean, float* rstd, const T_* inp, const T_* weight,
                       const T_* bias, int B, int T, int C, cudaStream_t stream) {
  GPT2_CHECK(B >= 1 && T >= 1 && C >= 1, "B=", B, " T=", T, " C=", C);
  GPT2_CHECK(out != nullptr && inp != nullptr && weight != nullptr && bias != nullptr);
  const int64_t rows = static_cast<int64_t>(B) * T;
  if (packed_rows_fit<T_>(C, {out, inp, weight, bias})) {
    layernorm_forward_packed_kernel<<<grid_size(rows, kWarpsPerBlock), kRowThreads, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, rows, C, static_cast<const T_*>(nullptr),
        static_cast<T_*>(nullptr));
  } else {
    layernorm_forward_kernel<<<grid_size(rows, kWarpsPerBlock), kRowThreads, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, rows, C);
  }
  GPT2_CUDA_CHECK_LAUNCH();
}

template <typename T_>
void residual_layernorm_forward(T_* residual_out, T_* out, float* mean, float* rstd,
                                const T_* residual, const T_* addend, const T_* weight,
                                const T_* bias, int B, int T, int C, cudaStream_t stream) {
  GPT2_CHECK(B >= 1 && T >= 1 && C >= 1, "B=", B, " T=", T, " C=", C);
  GPT2_CHECK(residual_out != nullptr && out != nullptr && residual != nullptr &&
             addend != nullptr && weight != nullptr && bias != nullptr);
  const int64_t rows = static_cast<int64_t>(B) * T;
  if (packed_rows_fit<T_>(C, {out, residual, addend, residual_out, weight, bias})) {
    layernorm_forward_packed_kernel<<<grid_size(rows, kWarpsPerBlock), kRowThreads, 0, stream>>>(
        out, mean, rstd, residual, weight, bias, rows, C, addend, residual_out);
    GPT2_CUDA_CHECK_LAUNCH();
    return;
  }
  residual_forward(residual_out, residual, addend, rows * C, stream);
  layernorm_forward(out, mean, rstd, residual_out, weight, bias, B, T, C, stream);
}

int64_t layernorm_backward_scratch_floats(int B, int T, int C) {
  return 2 * ceil_div(static_cast<int64_t>(B) * T, kBackwardRowsPerChunk) * C;
}

template <typename T_>
void layernorm_backward(T_* dinp, T_* dweight, T_* dbias, const T_* dout, const T_* inp,
                        const T_* weight, const float* mean, const float* rstd, int B, int T,
                        int C, float* scratch, cudaStream_t stream) {
  GPT2_CHECK(B >= 1 && T >= 1 && C >= 1, "B=", B, " T=", T, " C=", C);
  GPT2_CHECK(dinp != nullptr && dweight != nullptr && dbias != nullptr && dout != nullptr &&
             inp != nullptr && weight != nullptr && mean != nullptr && rstd != nullptr &&
             scratch != nullptr);
  const int64_t rows = static_cast<int64_t>(B) * T;
  const int64_t chunks = ceil_div(rows, kBackwardRowsPerChunk);

  float* partial_dweight = scratch;
  float* partial_dbias = scratch + chunks * C;
  if (packed_rows_fit<T_>(C, {dinp, dout, inp, weight})) {
    const int packs_per_lane = static_cast<int>(ceil_div(C / Pack16<T_>::kSize, 32));
    switch (packs_per_lane) {
#define GPT2_LAYERNORM_BACKWARD_CASE(N)                                                        \
  case N:                                                                                      \
    launch_layernorm_backward_packed<T_, N>(dinp, partial_dweight, partial_dbias, dout, inp,   \
                                            weight, mean, rstd, rows, C, chunks, stream);      \
    break;
      GPT2_LAYERNORM_BACKWARD_CASE(1)
      GPT2_LAYERNORM_BACKWARD_CASE(2)
      GPT2_LAYERNORM_BACKWARD_CASE(3)
      GPT2_LAYERNORM_BACKWARD_CASE(4)
      GPT2_LAYERNORM_BACKWARD_CASE(5)
      GPT2_LAYERNORM_BACKWARD_CASE(6)
      GPT2_LAYERNORM_BACKWARD_CASE(7)
      GPT2_LAYERNORM_BACKWARD_CASE(8)
#undef GPT2_LAYERNORM_BACKWARD_CASE
      default:
        GPT2_FAIL("layernorm_backward: ", packs_per_lane, " packs per lane");
    }
  } else {
    layernorm_backward_dinp_kernel<<<grid_size(rows, kWarpsPerBlock), kRowThreads, 0, stream>>>(
        dinp, dout, inp, weight, mean, rstd, rows, C);
    GPT2_CUDA_CHECK_LAUNCH();
    const dim3 partials_grid(static_cast<unsigned int>(chunks), grid_size(C, kColumnSumThreads));
    layernorm_backward_partials_kernel<<<partials_grid, kColumnSumThreads, 0, stream>>>(
        partial_dweight, partial_dbias, dout, inp, mean, rstd, rows, C);
    GPT2_CUDA_CHECK_LAUNCH();
  }
  launch_add_column_partials_pair(dweight, partial_dweight, dbias, partial_dbias, chunks, C,
                                  stream);
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int, int, int, cudaStream_t);
template void layernorm_forward<__nv_bfloat16>(__nv_bfloat16*, float*, float*,
                                               const __nv_bfloat16*, const __nv_bfloat16*,
                                               const __nv_bfloat16*, int, int, int,
                                               cudaStream_t);
template void residual_layernorm_forward<float>(float*, float*, float*, float*, const float*,
                                                const float*, const float*, const float*, int,
                                                int, int, cudaStream_t);
template void residual_layernorm_forward<__nv_bfloat16>(
    __nv_bfloat16*, __nv_bfloat16*, float*, float*, const __nv_bfloat16*, const __nv_bfloat16*,
    const __nv_bfloat16*, const __nv_bfloat16*, int, int, int, cudaStream_t);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int, int,
                                        float*, cudaStream_t);
template void layernorm_backward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*,
                                                const __nv_bfloat16*, const __nv_bfloat16*,
                                                const __nv_bfloat16*, const float*,
                                                const float*, int, int, int, float*,
                                                cudaStream_t);

}  // namespace gpt2::gpu
