/**
 * @file fp8_cast.cu
 * @brief fp8_cast_transpose (fp8_cast.cuh): a block of 512 threads per 128 x 128 tile.
 *
 * Load: each thread takes runs of 8 columns of one row (4 runs, rows 32 apart): one 16-byte
 * load when the run is whole and aligned (bf16; two for fp32), with a fused GELU backward the
 * GELU input's run beside it, converts (pairs of codes), writes the 8 codes to `out` in one
 * 8-byte store and to a shared tile. Transpose: after one barrier each thread gathers runs of
 * 16 rows of one column from the tile and writes them to `out_t` in one 16-byte store (a
 * column's 128 codes are one whole cache line, written by 8 neighbouring threads). Ragged
 * or unaligned runs go element by element. Column sums (fused bias gradient): each thread adds
 * its 4 rows, lanes l and l ^ 16 (the same columns) add theirs, and a thread per column adds
 * the 16 warps' sums in warp order. amax: the thread's finite |x|, then raise_block_amax.
 */
#include "kernels/gpu/fp8_cast.cuh"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "base/error.h"
#include "kernels/gpu/common.cuh"
#include "kernels/gpu/fp8_device.cuh"
#include "kernels/gpu/gelu_device.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kTileRows = kFp8CastTileRows;
constexpr int kTileCols = 128;
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kRun = 8;         // columns per load run
constexpr int kColumnRun = 16;  // rows per transposed store run

// The shared tile: rows of kTileCols + 4 bytes (33 words), and one more word after every run
// of 16 rows, so that a warp's column gathers (8 runs of 16 rows) fall on distinct banks.
constexpr int kTileStride = kTileCols + 4;
constexpr int kTileBytes = kTileRows * kTileStride + kTileRows / kColumnRun * 4;
__device__ __forceinline__ int tile_offset(int r, int c) {
  return r * kTileStride + r / kColumnRun * 4 + c;
}

struct CastShape {
  int64_t rows, cols;
  // whole runs may use 16-byte loads of in and gelu_input, 8/16-byte stores of out/out_t
  bool vector_in, vector_gelu, vector_out, vector_out_t;
};

__device__ __forceinline__ void load_run(const __nv_bfloat16* p, float (&x)[kRun]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int j = 0; j < kRun / 2; ++j) {
    const float2 f = __bfloat1622float2(pairs[j]);
    x[2 * j] = f.x;
    x[2 * j + 1] = f.y;
  }
}

__device__ __forceinline__ void load_run(const float* p, float (&x)[kRun]) {
  const float4 lo = reinterpret_cast<const float4*>(p)[0];
  const float4 hi = reinterpret_cast<const float4*>(p)[1];
  x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w;
  x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
}

/// x = the run at p, `valid` of its values (the rest 0), vector loads when `vector`.
template <typename T_>
__device__ __forceinline__ void load_values(const T_* p, bool vector, int64_t valid,
                                            float (&x)[kRun]) {
  if (vector && valid >= kRun) {
    load_run(p, x);
    return;
  }
#pragma unroll
  for (int j = 0; j < kRun; ++j) x[j] = j < valid ? to_float(p[j]) : 0.f;
}

template <typename T_, __nv_fp8_interpretation_t kFormat>
__global__ void __launch_bounds__(kThreads)
    fp8_cast_transpose_kernel(const T_* in, const CastShape shape, const float* scale, uint8_t* out,
                              uint8_t* out_t, float* amax, const Fp8CastFusion<T_> fusion) {
  __shared__ __align__(16) uint8_t tile[kTileBytes];
  __shared__ float warp_column_sums[kWarps][kTileCols];
  __shared__ float reduce_scratch[32];
  const int64_t rows = shape.rows, cols = shape.cols;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTileRows;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  const float s = *scale;
  float largest = 0.0f;
  float column_sums[kRun] = {};
  constexpr int kRunsPerRow = kTileCols / kRun;
  for (int i = threadIdx.x; i < kTileRows * kRunsPerRow; i += kThreads) {
    const int r = i / kRunsPerRow, c = (i % kRunsPerRow) * kRun;
    const int64_t row = row0 + r, col = col0 + c;
    __align__(8) uint8_t codes[kRun] = {};
    if (row < rows && col < cols) {
      const int64_t valid = cols - col;
      float x[kRun];
      load_values(in + row * cols + col, shape.vector_in, valid, x);
      if (fusion.gelu_input != nullptr) {
        float pre[kRun];
        load_values(fusion.gelu_input + row * cols + col, shape.vector_gelu, valid, pre);
#pragma unroll
        for (int j = 0; j < kRun; ++j) x[j] = to_float(from_float<T_>(gelu_grad(pre[j]) * x[j]));
      }
#pragma unroll
      for (int j = 0; j < kRun; ++j) {
        if (isfinite(x[j])) largest = fmaxf(largest, fabsf(x[j]));
        column_sums[j] += x[j];
      }
      fp8_codes<kFormat>(x, s, codes);
      if (out != nullptr) {
        if (valid >= kRun && shape.vector_out) {
          *reinterpret_cast<uint2*>(out + row * cols + col) = *reinterpret_cast<uint2*>(codes);
        } else {
          for (int j = 0; j < kRun && j < valid; ++j) out[row * cols + col + j] = codes[j];
        }
      }
    }
    // Two 4-byte stores: the padded rows keep 4-byte alignment only.
    const uint2 packed = *reinterpret_cast<uint2*>(codes);
    *reinterpret_cast<uint32_t*>(&tile[tile_offset(r, c)]) = packed.x;
    *reinterpret_cast<uint32_t*>(&tile[tile_offset(r, c + 4)]) = packed.y;
  }
  if (out_t != nullptr) {
    __syncthreads();
    constexpr int kRunsPerColumn = kTileRows / kColumnRun;
    for (int i = threadIdx.x; i < kTileCols * kRunsPerColumn; i += kThreads) {
      const int c = i / kRunsPerColumn, r = (i % kRunsPerColumn) * kColumnRun;
      const int64_t col = col0 + c, row = row0 + r;
      if (col >= cols || row >= rows) continue;
      __align__(16) uint8_t codes[kColumnRun];
#pragma unroll
      for (int j = 0; j < kColumnRun; ++j) codes[j] = tile[tile_offset(r + j, c)];
      if (row + kColumnRun <= rows && shape.vector_out_t) {
        *reinterpret_cast<uint4*>(out_t + col * rows + row) = *reinterpret_cast<uint4*>(codes);
      } else {
        for (int j = 0; j < kColumnRun && row + j < rows; ++j)
          out_t[col * rows + row + j] = codes[j];
      }
    }
  }
  if (fusion.column_partials != nullptr) {
    // Thread t's runs are columns (t % 16) * 8 + [0, 8) of rows t / 16 + 32 k: lanes l and
    // l ^ 16 share their columns, and the warps' sums go in warp order.
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < kRun; ++j)
      column_sums[j] += __shfl_xor_sync(kFullWarpMask, column_sums[j], 16);
    if (lane < 16) {
#pragma unroll
      for (int j = 0; j < kRun; ++j) warp_column_sums[warp][lane * kRun + j] = column_sums[j];
    }
    __syncthreads();
    if (threadIdx.x < kTileCols && col0 + threadIdx.x < cols) {
      float total = 0.0f;
      for (int w = 0; w < kWarps; ++w) total += warp_column_sums[w][threadIdx.x];
      fusion.column_partials[blockIdx.y * cols + col0 + threadIdx.x] = total;
    }
  }
  if (amax != nullptr) raise_block_amax(largest, amax, reduce_scratch);
}

template <typename T_, __nv_fp8_interpretation_t kFormat>
void launch(const T_* in, int64_t rows, int64_t cols, const float* scale, uint8_t* out,
            uint8_t* out_t, float* amax, const Fp8CastFusion<T_>& fusion, cudaStream_t stream) {
  const int64_t tiles_y = ceil_div(rows, kTileRows), tiles_x = ceil_div(cols, kTileCols);
  GPT2_CHECK(tiles_y <= 65535 && tiles_x < (int64_t{1} << 31), "an fp8 cast of ", rows, " x ", cols,
             " exceeds the grid");
  const bool whole_runs = cols % kRun == 0;
  const CastShape shape{rows, cols, whole_runs && alignment_bytes(in) >= 16,
                        whole_runs && alignment_bytes(fusion.gelu_input) >= 16,
                        whole_runs && alignment_bytes(out) >= 8,
                        rows % kColumnRun == 0 && alignment_bytes(out_t) >= 16};
  const dim3 grid(static_cast<unsigned>(tiles_x), static_cast<unsigned>(tiles_y));
  fp8_cast_transpose_kernel<T_, kFormat>
      <<<grid, kThreads, 0, stream>>>(in, shape, scale, out, out_t, amax, fusion);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T_>
void fp8_cast_transpose(const T_* in, int64_t rows, int64_t cols, const float* scale,
                        cpu::Fp8Format format, uint8_t* out, uint8_t* out_t, float* amax,
                        cudaStream_t stream, const Fp8CastFusion<T_>& fusion) {
  GPT2_CHECK(rows >= 0 && cols >= 0, "an fp8 cast of ", rows, " x ", cols);
  GPT2_CHECK(scale != nullptr, "an fp8 cast needs a scale");
  if (rows == 0 || cols == 0) return;
  if (format == cpu::Fp8Format::kE4M3) {
    launch<T_, __NV_E4M3>(in, rows, cols, scale, out, out_t, amax, fusion, stream);
  } else {
    launch<T_, __NV_E5M2>(in, rows, cols, scale, out, out_t, amax, fusion, stream);
  }
}

template void fp8_cast_transpose<float>(const float*, int64_t, int64_t, const float*,
                                        cpu::Fp8Format, uint8_t*, uint8_t*, float*, cudaStream_t,
                                        const Fp8CastFusion<float>&);
template void fp8_cast_transpose<__nv_bfloat16>(const __nv_bfloat16*, int64_t, int64_t,
                                                const float*, cpu::Fp8Format, uint8_t*, uint8_t*,
                                                float*, cudaStream_t,
                                                const Fp8CastFusion<__nv_bfloat16>&);

}  // namespace gpt2::gpu
