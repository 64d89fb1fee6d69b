/**
 * @file fp8_cast.cu
 * @brief fp8_cast_transpose (fp8_cast.cuh): a block per 64 x 64 tile, 256 threads.
 *
 * Each thread converts 16 elements of the tile read row by row (coalesced along cols) and
 * writes their codes to `out` and to a shared tile; after one barrier it reads the shared tile
 * column by column and writes `out_t` along its rows (coalesced along rows). amax: a max over
 * the thread's finite |x|, then over the warp by shuffles, then one atomicMax per warp on the
 * float's bits (non-negative floats order as their bit patterns do).
 */
#include "kernels/gpu/fp8_cast.cuh"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "base/error.h"
#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kTile = 64;
constexpr int kThreads = 256;  // 4 rows of 64 per pass, 16 passes

template <typename T_, __nv_fp8_interpretation_t kFormat>
__global__ void __launch_bounds__(kThreads)
    fp8_cast_transpose_kernel(const T_* in, int64_t rows, int64_t cols, const float* scale,
                              uint8_t* out, uint8_t* out_t, float* amax) {
  __shared__ uint8_t tile[kTile][kTile + 4];  // + 4: the column reads hit distinct banks
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  const float s = *scale;
  float largest = 0.0f;
  for (int r = ty; r < kTile; r += kThreads / kTile) {
    const int64_t row = row0 + r, col = col0 + tx;
    if (row >= rows || col >= cols) continue;
    const float x = to_float(in[row * cols + col]);
    if (isfinite(x)) largest = fmaxf(largest, fabsf(x));
    const auto code =
        static_cast<uint8_t>(__nv_cvt_float_to_fp8(x * s, __NV_SATFINITE, kFormat));
    if (out != nullptr) out[row * cols + col] = code;
    tile[r][tx] = code;
  }
  if (out_t != nullptr) {
    __syncthreads();
    for (int c = ty; c < kTile; c += kThreads / kTile) {
      const int64_t col = col0 + c, row = row0 + tx;
      if (row < rows && col < cols) out_t[col * rows + row] = tile[tx][c];
    }
  }
  if (amax != nullptr) {
    for (int offset = 16; offset > 0; offset /= 2)
      largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
    if (threadIdx.x % 32 == 0 && largest > 0.0f)
      atomicMax(reinterpret_cast<int*>(amax), __float_as_int(largest));
  }
}

template <typename T_, __nv_fp8_interpretation_t kFormat>
void launch(const T_* in, int64_t rows, int64_t cols, const float* scale, uint8_t* out,
            uint8_t* out_t, float* amax, cudaStream_t stream) {
  const int64_t tiles_y = ceil_div(rows, kTile), tiles_x = ceil_div(cols, kTile);
  GPT2_CHECK(tiles_y <= 65535 && tiles_x < (int64_t{1} << 31), "an fp8 cast of ", rows, " x ",
             cols, " exceeds the grid");
  const dim3 grid(static_cast<unsigned>(tiles_x), static_cast<unsigned>(tiles_y));
  fp8_cast_transpose_kernel<T_, kFormat>
      <<<grid, kThreads, 0, stream>>>(in, rows, cols, scale, out, out_t, amax);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T_>
void fp8_cast_transpose(const T_* in, int64_t rows, int64_t cols, const float* scale,
                        cpu::Fp8Format format, uint8_t* out, uint8_t* out_t, float* amax,
                        cudaStream_t stream) {
  GPT2_CHECK(rows >= 0 && cols >= 0, "an fp8 cast of ", rows, " x ", cols);
  GPT2_CHECK(scale != nullptr, "an fp8 cast needs a scale");
  if (rows == 0 || cols == 0) return;
  if (format == cpu::Fp8Format::kE4M3) {
    launch<T_, __NV_E4M3>(in, rows, cols, scale, out, out_t, amax, stream);
  } else {
    launch<T_, __NV_E5M2>(in, rows, cols, scale, out, out_t, amax, stream);
  }
}

template void fp8_cast_transpose<float>(const float*, int64_t, int64_t, const float*,
                                        cpu::Fp8Format, uint8_t*, uint8_t*, float*,
                                        cudaStream_t);
template void fp8_cast_transpose<__nv_bfloat16>(const __nv_bfloat16*, int64_t, int64_t,
                                                const float*, cpu::Fp8Format, uint8_t*,
                                                uint8_t*, float*, cudaStream_t);

}  // namespace gpt2::gpu
