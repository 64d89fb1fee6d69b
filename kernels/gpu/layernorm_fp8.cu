/**
 * @file layernorm_fp8.cu
 * @brief layernorm_forward_fp8 and residual_layernorm_forward_fp8; see layernorm_fp8.cuh.
 *
 * With `rows` wanted (the model wants both orders): the row codes, a warp a row and 8 rows a
 * block as the bf16 LayerNorm runs (layernorm_fp8_rows_kernel: no shared tile, so as many
 * blocks an SM as the registers allow and no tail of 32-row blocks), each row's output packs (8
 * bf16, rounded as the bf16 LayerNorm rounds them) becoming 8 codes in one 8-byte store; then,
 * with `transposed` wanted too, fp8_transpose (fp8_cast.cuh) writes the other order from them.
 * The transposed order alone (layernorm_fp8_kernel): block = 32 rows, 8 warps of 4 rows each,
 * the codes to the block's (32, C) shared tile; after one barrier a thread per column gathers
 * its 32 codes (a warp reads 32 neighbouring bytes of a row at a time: no bank conflicts) and
 * stores them as two 16-byte runs of `transposed`. (That kernel wrote both orders before;
 * measured against the split: bench/NOTES_fp8.md item 16.) The amax goes through
 * raise_block_amax once per block.
 */
#include "kernels/gpu/layernorm_fp8.cuh"

#include <type_traits>

#include <cuda_fp8.h>

#include "base/error.h"
#include "kernels/gpu/common.cuh"
#include "kernels/gpu/fp8_device.cuh"
#include "kernels/gpu/layernorm_row.cuh"

namespace gpt2::gpu {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kRowsPerBlock = 32;
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kPack = Pack16<bf16>::kSize;
constexpr int kMaxChannels = 32 * kLayerNormMaxPacksPerLane * kPack;  // 2048
constexpr int kStaticSharedLimit = 48 * 1024;

struct RowsShape {
  int64_t rows;
  int C;
  bool vector_transposed;  // whole 32-row tiles may store 16-byte runs of `transposed`
};

// A pack of the LayerNorm's outputs as E4M3 codes at `scale`; its finite magnitudes raise
// `largest` (the amax).
__device__ __forceinline__ uint2 pack_codes(const Pack16<bf16>& y, float scale, float& largest) {
  float x[kPack];
#pragma unroll
  for (int j = 0; j < kPack; ++j) {
    x[j] = to_float(y.values[j]);
    if (isfinite(x[j])) largest = fmaxf(largest, fabsf(x[j]));
  }
  return fp8_code_words<__NV_E4M3>(x, scale);
}

template <int kPacksPerLane>
__global__ void __launch_bounds__(kThreads)
    layernorm_fp8_kernel(const Fp8Destination out, float* mean, float* rstd, const bf16* inp,
                         const bf16* weight, const bf16* bias, const RowsShape shape,
                         const bf16* addend, bf16* residual_out) {
  extern __shared__ __align__(16) uint8_t tile[];  // (kRowsPerBlock, C) codes
  __shared__ float reduce_scratch[32];
  const int64_t rows = shape.rows;
  const int C = shape.C;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const float scale = *out.scale;
  float largest = 0.0f;
  for (int r = threadIdx.x / 32; r < kRowsPerBlock && row0 + r < rows; r += kWarps) {
    const int64_t row = row0 + r;
    const bool residual = addend != nullptr;
    const RowStatistics stats = layernorm_row_packed<bf16, kPacksPerLane>(
        inp + row * C, residual ? addend + row * C : nullptr,
        residual ? residual_out + row * C : nullptr, weight, bias, C,
        [&](int p, const Pack16<bf16>& y) {
          *reinterpret_cast<uint2*>(tile + r * C + p * kPack) = pack_codes(y, scale, largest);
        });
    if (threadIdx.x % 32 == 0) {
      if (mean) mean[row] = stats.mean;
      if (rstd) rstd[row] = stats.rstd;
    }
  }
  if (out.transposed != nullptr) {
    __syncthreads();
    const int valid =
        rows - row0 < kRowsPerBlock ? static_cast<int>(rows - row0) : kRowsPerBlock;
    const bool vector = shape.vector_transposed && valid == kRowsPerBlock;
    for (int c = threadIdx.x; c < C; c += kThreads) {
      __align__(16) uint8_t column[kRowsPerBlock];
#pragma unroll
      for (int r = 0; r < kRowsPerBlock; ++r) column[r] = r < valid ? tile[r * C + c] : 0;
      uint8_t* dst = out.transposed + static_cast<int64_t>(c) * rows + row0;
      if (vector) {
        reinterpret_cast<uint4*>(dst)[0] = reinterpret_cast<const uint4*>(column)[0];
        reinterpret_cast<uint4*>(dst)[1] = reinterpret_cast<const uint4*>(column)[1];
      } else {
        for (int r = 0; r < valid; ++r) dst[r] = column[r];
      }
    }
  }
  if (out.amax != nullptr) raise_block_amax(largest, out.amax, reduce_scratch);
}

// The row codes alone, a warp a row: see the file comment.
template <int kPacksPerLane>
__global__ void __launch_bounds__(kThreads)
    layernorm_fp8_rows_kernel(const Fp8Destination out, float* mean, float* rstd,
                              const bf16* inp, const bf16* weight, const bf16* bias,
                              const int64_t rows, const int C, const bf16* addend,
                              bf16* residual_out) {
  __shared__ float reduce_scratch[32];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const float scale = *out.scale;
  float largest = 0.0f;
  if (row < rows) {  // no early return: every thread takes part in the block's amax
    const bool residual = addend != nullptr;
    const RowStatistics stats = layernorm_row_packed<bf16, kPacksPerLane>(
        inp + row * C, residual ? addend + row * C : nullptr,
        residual ? residual_out + row * C : nullptr, weight, bias, C,
        [&](int p, const Pack16<bf16>& y) {
          *reinterpret_cast<uint2*>(out.rows + row * C + p * kPack) =
              pack_codes(y, scale, largest);
        });
    if (threadIdx.x % 32 == 0) {
      if (mean) mean[row] = stats.mean;
      if (rstd) rstd[row] = stats.rstd;
    }
  }
  if (out.amax != nullptr) raise_block_amax(largest, out.amax, reduce_scratch);
}

void launch(const Fp8Destination& out, float* mean, float* rstd, const bf16* inp,
            const bf16* weight, const bf16* bias, int B, int T, int C, const bf16* addend,
            bf16* residual_out, cudaStream_t stream) {
  GPT2_CHECK(B >= 1 && T >= 1, "B=", B, " T=", T);
  GPT2_CHECK(layernorm_fp8_supported(C), "a LayerNorm to FP8 codes needs C a multiple of ",
             kPack, " up to ", kMaxChannels, " (C=", C, ")");
  GPT2_CHECK(out.scale != nullptr, "a LayerNorm to FP8 codes needs a scale");
  GPT2_CHECK(out.format == cpu::Fp8Format::kE4M3, "a LayerNorm writes E4M3 codes only");
  for (const void* p : {static_cast<const void*>(inp), static_cast<const void*>(weight),
                        static_cast<const void*>(bias), static_cast<const void*>(addend),
                        static_cast<const void*>(residual_out)})
    GPT2_CHECK(alignment_bytes(p) >= 16, "a LayerNorm to FP8 codes needs 16-byte aligned rows");
  GPT2_CHECK(alignment_bytes(out.rows) >= 8, "FP8 code rows need 8-byte alignment");
  const int64_t rows = static_cast<int64_t>(B) * T;
  const RowsShape shape{rows, C, rows % 16 == 0 && alignment_bytes(out.transposed) >= 16};
  const int shared_bytes = kRowsPerBlock * C;
  // The row's packs per lane as a template argument: registers for the width at hand.
  const int packs_per_lane = static_cast<int>(ceil_div(C / kPack, 32));
  auto run = [&](auto packs) {
    constexpr int kPacksPerLane = decltype(packs)::value;
    if (out.rows != nullptr) {
      layernorm_fp8_rows_kernel<kPacksPerLane><<<grid_size(rows, kWarps), kThreads, 0, stream>>>(
          out, mean, rstd, inp, weight, bias, rows, C, addend, residual_out);
      return;
    }
    if (shared_bytes > kStaticSharedLimit) {
      static const bool opted_in = [] {
        GPT2_CUDA_CHECK(cudaFuncSetAttribute(layernorm_fp8_kernel<kPacksPerLane>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             kRowsPerBlock * kMaxChannels));
        return true;
      }();
      (void)opted_in;
    }
    layernorm_fp8_kernel<kPacksPerLane>
        <<<grid_size(rows, kRowsPerBlock), kThreads, shared_bytes, stream>>>(
            out, mean, rstd, inp, weight, bias, shape, addend, residual_out);
  };
  switch (packs_per_lane) {
    case 1: run(std::integral_constant<int, 1>{}); break;
    case 2: run(std::integral_constant<int, 2>{}); break;
    case 3: run(std::integral_constant<int, 3>{}); break;
    case 4: run(std::integral_constant<int, 4>{}); break;
    case 5: run(std::integral_constant<int, 5>{}); break;
    case 6: run(std::integral_constant<int, 6>{}); break;
    case 7: run(std::integral_constant<int, 7>{}); break;
    default: run(std::integral_constant<int, kLayerNormMaxPacksPerLane>{}); break;
  }
  GPT2_CUDA_CHECK_LAUNCH();
  if (out.rows != nullptr && out.transposed != nullptr)
    fp8_transpose(out.rows, rows, C, out.transposed, stream);
}

}  // namespace

bool layernorm_fp8_supported(int C) { return C >= kPack && C % kPack == 0 && C <= kMaxChannels; }

void layernorm_forward_fp8(const Fp8Destination& out, float* mean, float* rstd, const bf16* inp,
                           const bf16* weight, const bf16* bias, int B, int T, int C,
                           cudaStream_t stream) {
  GPT2_CHECK(inp != nullptr && weight != nullptr && bias != nullptr);
  launch(out, mean, rstd, inp, weight, bias, B, T, C, nullptr, nullptr, stream);
}

void residual_layernorm_forward_fp8(bf16* residual_out, const Fp8Destination& out, float* mean,
                                    float* rstd, const bf16* residual, const bf16* addend,
                                    const bf16* weight, const bf16* bias, int B, int T, int C,
                                    cudaStream_t stream) {
  GPT2_CHECK(residual_out != nullptr && residual != nullptr && addend != nullptr &&
             weight != nullptr && bias != nullptr);
  launch(out, mean, rstd, residual, weight, bias, B, T, C, addend, residual_out, stream);
}

}  // namespace gpt2::gpu
