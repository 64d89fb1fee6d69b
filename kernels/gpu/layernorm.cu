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

/// The packed backward, dinp and the parameter-gradient partials in one pass over dout and inp:
/// block = chunk of kBackwardRowsPerChunk rows (the partials' chunk), warp w takes the chunk's
/// rows w, w + kWarpsPerBlock, ...; lane l holds packs l, l + 32, ... (kPacksPerLane of them)
/// and sums dout * norm and dout over its rows for its channels; each warp stores its sums in
/// shared memory (8 warps x 2 C floats, dynamic) and a thread per channel adds them in warp
/// order into the chunk's partials.
/// Without kSumsInPass (wide rows, whose sums would not fit in registers) only dinp.
template <typename T_, int kPacksPerLane, bool kSumsInPass>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_backward_packed_kernel(T_* dinp, float* partial_dweight, float* partial_dbias,
                                     const T_* dout, const T_* inp, const T_* weight,
                                     const float* mean, const float* rstd, int64_t rows, int C) {
  constexpr int kPack = Pack16<T_>::kSize;
  extern __shared__ float warp_sums[];  // [warp][0, C): dweight, [warp][C, 2C): dbias
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int packs = C / kPack;
  const int64_t chunk = blockIdx.x;
  const int64_t row_begin = chunk * kBackwardRowsPerChunk;
  const int64_t row_end = min(row_begin + kBackwardRowsPerChunk, rows);
  Pack16<T_> ws[kPacksPerLane];
  float sum_dweight[kPacksPerLane][kPack] = {};
  float sum_dbias[kPacksPerLane][kPack] = {};
#pragma unroll
  for (int i = 0; i < kPacksPerLane; ++i)
    if (lane + 32 * i < packs) ws[i] = load_pack16(weight + (lane + 32 * i) * kPack);

  for (int64_t row = row_begin + warp; row < row_end; row += kWarpsPerBlock) {
    const T_* x = inp + row * C;
    const T_* g = dout + row * C;
    const float row_mean = mean[row];
    const float row_rstd = rstd[row];
    Pack16<T_> xs[kPacksPerLane];
    Pack16<T_> gs[kPacksPerLane];
    float sum_dnorm = 0.0f;
    float sum_dnorm_norm = 0.0f;
#pragma unroll
    for (int i = 0; i < kPacksPerLane; ++i) {
      const int p = lane + 32 * i;
      if (p < packs) {
        xs[i] = load_pack16(x + p * kPack);
        gs[i] = load_pack16(g + p * kPack);
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          const float norm = (to_float(xs[i].values[j]) - row_mean) * row_rstd;
          const float gj = to_float(gs[i].values[j]);
          const float dnorm = gj * to_float(ws[i].values[j]);
          sum_dnorm += dnorm;
          sum_dnorm_norm += dnorm * norm;
          if constexpr (kSumsInPass) {
            sum_dweight[i][j] += gj * norm;
            sum_dbias[i][j] += gj;
          }
        }
      }
    }
    const float mean_dnorm = warp_reduce_sum(sum_dnorm) / C;
    const float mean_dnorm_norm = warp_reduce_sum(sum_dnorm_norm) / C;
    T_* dx = dinp + row * C;
#pragma unroll
    for (int i = 0; i < kPacksPerLane; ++i) {
      const int p = lane + 32 * i;
      if (p < packs) {
        Pack16<T_> d = load_pack16(dx + p * kPack);
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          const float norm = (to_float(xs[i].values[j]) - row_mean) * row_rstd;
          const float dnorm = to_float(gs[i].values[j]) * to_float(ws[i].values[j]);
          const float grad = row_rstd * (dnorm - mean_dnorm - norm * mean_dnorm_norm);
          d.values[j] = from_float<T_>(to_float(d.values[j]) + grad);
        }
        store_pack16(dx + p * kPack, d);
      }
    }
  }

  if constexpr (kSumsInPass) {
    // Each warp stores its sums (a lane's 8 or 4 channels as 16-byte stores), one barrier,
    // then a thread per channel adds the warps' in warp order: deterministic.
    float* mine = warp_sums + static_cast<size_t>(warp) * 2 * C;
#pragma unroll
    for (int i = 0; i < kPacksPerLane; ++i) {
      const int p = lane + 32 * i;
      if (p < packs) {
#pragma unroll
        for (int j = 0; j < kPack; j += 4) {
          *reinterpret_cast<float4*>(mine + p * kPack + j) = make_float4(
              sum_dweight[i][j], sum_dweight[i][j + 1], sum_dweight[i][j + 2],
              sum_dweight[i][j + 3]);
          *reinterpret_cast<float4*>(mine + C + p * kPack + j) =
              make_float4(sum_dbias[i][j], sum_dbias[i][j + 1], sum_dbias[i][j + 2],
                          sum_dbias[i][j + 3]);
        }
      }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
      float total = warp_sums[c];
#pragma unroll
      for (int w = 1; w < kWarpsPerBlock; ++w)
        total += warp_sums[static_cast<size_t>(w) * 2 * C + c];
      if (c < C) partial_dweight[chunk * C + c] = total;
      else partial_dbias[chunk * C + c - C] = total;
    }
  }
}

/// Packs per lane up to which the packed backward sums the parameter gradients in its pass.
constexpr int kMaxPacksPerLaneWithSums = 5;

template <typename T_, int kPacksPerLane>
void launch_layernorm_backward_packed(T_* dinp, float* partial_dweight, float* partial_dbias,
                                      const T_* dout, const T_* inp, const T_* weight,
                                      const float* mean, const float* rstd, int64_t rows, int C,
                                      int64_t chunks, cudaStream_t stream) {
  constexpr bool kSumsInPass = kPacksPerLane <= kMaxPacksPerLaneWithSums;
  const size_t shared_bytes =
      kSumsInPass ? kWarpsPerBlock * 2 * static_cast<size_t>(C) * sizeof(float) : 0;
  const auto kernel = layernorm_backward_packed_kernel<T_, kPacksPerLane, kSumsInPass>;
  if (shared_bytes > 48 * 1024)  // 8 warps x 2C floats: above the default from C = 769
    GPT2_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(shared_bytes)));
  kernel<<<static_cast<unsigned int>(chunks), kRowThreads, shared_bytes, stream>>>(
          dinp, partial_dweight, partial_dbias, dout, inp, weight, mean, rstd, rows, C);
  GPT2_CUDA_CHECK_LAUNCH();
  if constexpr (!kSumsInPass) {
    const dim3 partials_grid(static_cast<unsigned int>(chunks), grid_size(C, kColumnSumThreads));
    layernorm_backward_partials_kernel<<<partials_grid, kColumnSumThreads, 0, stream>>>(
        partial_dweight, partial_dbias, dout, inp, mean, rstd, rows, C);
    GPT2_CUDA_CHECK_LAUNCH();
  }
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
