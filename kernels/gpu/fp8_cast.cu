/**
 * @file fp8_cast.cu
 * @brief fp8_cast_transpose and fp8_cast_transpose_group (fp8_cast.cuh): a block of 512
 *        threads per 128 x 128 tile.
 *
 * A launch takes up to kFp8CastJobsPerLaunch tensors (jobs, in the kernel's parameters) and
 * one block per tile of any of them, the tiles numbered job after job; a block finds its job
 * by the jobs' first tiles. (A weight cast alone was a launch of a few dozen tiles, about 11
 * us each, twice per weight per step.)
 *
 * Load: each thread takes runs of 8 columns of one row (4 runs, rows 32 apart): one 16-byte
 * load when the run is whole and aligned (bf16; two for fp32), with a fused GELU backward the
 * GELU input's run beside it, converts (pairs of codes), writes the 8 codes to `out` in one
 * 8-byte store and to a shared tile. A whole aligned tile takes cast_whole_tile, the same
 * arithmetic with none of the general loop's bounds checks and index math (which made the
 * kernel bound by instruction issue, at a third of the memory bandwidth: ncu, H200).
 * Transpose: after one barrier each thread gathers runs of 16 rows of one column from the tile
 * and writes them to `out_t` in one 16-byte store (a column's 128 codes are one whole cache
 * line, written by 8 neighbouring threads). Ragged
 * or unaligned runs go element by element. Column sums (fused bias gradient): each thread adds
 * its 4 rows, lanes l and l ^ 16 (the same columns) add theirs, and a thread per column adds
 * the 16 warps' sums in warp order. amax: the thread's finite |x|, then raise_block_amax.
 */
#include "kernels/gpu/fp8_cast.cuh"

#include <type_traits>

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

/// A job as the kernel takes it: whether its whole runs may use 16-byte loads of in and
/// gelu_input, and 8- and 16-byte stores of out and out_t.
template <typename T_>
struct CastJob {
  Fp8CastJob<T_> job;
  bool vector_in, vector_gelu, vector_out, vector_out_t;
};

template <typename T_>
struct CastLaunch {
  int count;
  int64_t first_tile[kFp8CastJobsPerLaunch + 1];  // job j: [first_tile[j], first_tile[j + 1])
  CastJob<T_> jobs[kFp8CastJobsPerLaunch];
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

/// out_t's runs of a whole tile (every row and column inside the tensor, out_t 16-byte
/// aligned, rows a multiple of 16): the first 256 threads each take 4 columns x 16 rows, read
/// as 16 words (one per row) and transposed in registers by byte permutes into 4 columns of 16
/// codes, each one 16-byte store. Lane l of warp w takes rows 16 (l % 8) + [0, 16) and columns
/// 4 G + [0, 4), G = 8 (l / 8) + w: a column's 8 runs are one whole 128-byte line, and the
/// word reads of a row fall on 32 distinct banks (the tile's padding gives row R the bank
/// offset 33 R + R / 16).
__device__ __forceinline__ void store_transposed_whole(const uint8_t* tile, uint8_t* out_t,
                                                       int64_t rows, int64_t row0, int64_t col0) {
  if (threadIdx.x >= 256) return;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int r = kColumnRun * (lane % 8);
  const int c = 4 * (8 * (lane / 8) + warp);
  uint32_t words[kColumnRun];
#pragma unroll
  for (int i = 0; i < kColumnRun; ++i)
    words[i] = *reinterpret_cast<const uint32_t*>(&tile[tile_offset(r + i, c)]);
  uint4 columns[4];  // columns[k] = codes of column c + k, rows r .. r + 15
  uint32_t* column_words = reinterpret_cast<uint32_t*>(columns);
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // rows r + 4q .. r + 4q + 3
    const uint32_t a = words[4 * q], b = words[4 * q + 1];
    const uint32_t e = words[4 * q + 2], f = words[4 * q + 3];
    const uint32_t low_ab = __byte_perm(a, b, 0x5140), high_ab = __byte_perm(a, b, 0x7362);
    const uint32_t low_ef = __byte_perm(e, f, 0x5140), high_ef = __byte_perm(e, f, 0x7362);
    column_words[0 * 4 + q] = __byte_perm(low_ab, low_ef, 0x5410);
    column_words[1 * 4 + q] = __byte_perm(low_ab, low_ef, 0x7632);
    column_words[2 * 4 + q] = __byte_perm(high_ab, high_ef, 0x5410);
    column_words[3 * 4 + q] = __byte_perm(high_ab, high_ef, 0x7632);
  }
  uint8_t* dst = out_t + (col0 + c) * rows + row0 + r;
#pragma unroll
  for (int k = 0; k < 4; ++k) *reinterpret_cast<uint4*>(dst + k * rows) = columns[k];
}

/// out_t's runs of any tile: a thread per column and run of 16 rows, byte by byte.
__device__ __forceinline__ void store_transposed_ragged(const uint8_t* tile, uint8_t* out_t,
                                                        int64_t rows, int64_t cols, int64_t row0,
                                                        int64_t col0, bool vector_out_t) {
  constexpr int kRunsPerColumn = kTileRows / kColumnRun;
  for (int i = threadIdx.x; i < kTileCols * kRunsPerColumn; i += kThreads) {
    const int c = i / kRunsPerColumn, r = (i % kRunsPerColumn) * kColumnRun;
    const int64_t col = col0 + c, row = row0 + r;
    if (col >= cols || row >= rows) continue;
    __align__(16) uint8_t codes[kColumnRun];
#pragma unroll
    for (int j = 0; j < kColumnRun; ++j) codes[j] = tile[tile_offset(r + j, c)];
    if (row + kColumnRun <= rows && vector_out_t) {
      *reinterpret_cast<uint4*>(out_t + col * rows + row) = *reinterpret_cast<uint4*>(codes);
    } else {
      for (int j = 0; j < kColumnRun && row + j < rows; ++j) out_t[col * rows + row + j] = codes[j];
    }
  }
}

/// What a launch folds into its casts (Fp8CastFusion): no GELU, a GELU backward (gelu_input),
/// or a GELU forward (gelu_forward). Each costs registers and instructions, so the launches
/// that do not want one leave it out.
enum class GeluFold { kNone, kBackward, kForward };

/// A run of a GELU's input becomes its output, rounded to T_ as a bf16 GELU output would be.
template <typename T_>
__device__ __forceinline__ void fold_gelu_forward(float (&x)[kRun]) {
#pragma unroll
  for (int j = 0; j < kRun; ++j) x[j] = to_float(from_float<T_>(gelu_by_exp2(x[j])));
}

/// A run of the gradient of a GELU's output becomes the gradient of its input: gelu'(pre) * x,
/// rounded to T_ as gelu_backward writes it.
template <typename T_>
__device__ __forceinline__ void fold_gelu_backward(float (&x)[kRun], const float (&pre)[kRun]) {
#pragma unroll
  for (int j = 0; j < kRun; ++j) x[j] = to_float(from_float<T_>(gelu_grad(pre[j]) * x[j]));
}

/// A run's share of the thread's amax (finite values only) and, kColumnSums, column sums.
template <bool kColumnSums>
__device__ __forceinline__ void account_run(const float (&x)[kRun], float& largest,
                                            float (&column_sums)[kColumnSums ? kRun : 1]) {
#pragma unroll
  for (int j = 0; j < kRun; ++j) {
    if (isfinite(x[j])) largest = fmaxf(largest, fabsf(x[j]));
    if constexpr (kColumnSums) column_sums[j] += x[j];
  }
}

/// The load phase of a whole tile (every row and column inside the tensor, in, gelu_input and
/// out aligned for vector accesses): the same runs, values, codes and sums as the general loop
/// in the kernel below, with one stepped offset for all three tensors, no bounds checks and the
/// codes kept in registers. Thread t's runs are columns (t % 16) * 8 + [0, 8) of rows
/// t / 16 + 32 k, k = 0..3.
template <typename T_, __nv_fp8_interpretation_t kFormat, bool kColumnSums, GeluFold kGelu>
__device__ __forceinline__ void cast_whole_tile(const Fp8CastJob<T_>& job, int64_t row0,
                                                int64_t col0, float s, uint8_t* tile,
                                                float& largest,
                                                float (&column_sums)[kColumnSums ? kRun : 1]) {
  constexpr int kRunsPerRow = kTileCols / kRun;
  constexpr int kRowStep = kThreads / kRunsPerRow;
  constexpr int kTileWordStep = (kRowStep * kTileStride + kRowStep / kColumnRun * 4) / 4;
  const int r = threadIdx.x / kRunsPerRow, c = threadIdx.x % kRunsPerRow * kRun;
  // One offset for in, gelu_input and out, their bases read from the launch's parameters at
  // each use (three stepped pointers held registers the column sums needed).
  int64_t at = (row0 + r) * job.cols + col0 + c;
  const int64_t step = kRowStep * job.cols;
  const bool gelu_backward = kGelu == GeluFold::kBackward && job.fusion.gelu_input != nullptr;
  const bool gelu_forward = kGelu == GeluFold::kForward && job.fusion.gelu_forward;
  auto* tile_words = reinterpret_cast<uint32_t*>(tile + tile_offset(r, c));
#pragma unroll 1
  for (int k = 0; k < kTileRows / kRowStep; ++k, at += step) {
    float x[kRun];
    load_run(job.in + at, x);
    if (gelu_backward) {
      float pre[kRun];
      load_run(job.fusion.gelu_input + at, pre);
      fold_gelu_backward<T_>(x, pre);
    }
    if (gelu_forward) fold_gelu_forward<T_>(x);
    account_run<kColumnSums>(x, largest, column_sums);
    const uint2 words = fp8_code_words<kFormat>(x, s);
    if (job.out != nullptr) *reinterpret_cast<uint2*>(job.out + at) = words;
    tile_words[0] = words.x;
    tile_words[1] = words.y;
    tile_words += kTileWordStep;
  }
}

/// kColumnSums: some job of the launch wants its column partials; kGelu: the GELU some of its
/// jobs fold in (each costs registers and instructions, so the other launches leave it out).
/// Three blocks an SM (40 registers) with either, four without: fc's gradient cast, the GELU
/// backward and the sums, ran at two (64 registers) until its whole-tile path stopped holding
/// three stepped pointers, at 48% of warps active and 2.5 TB/s (ncu, gpt2-medium, H200).
template <typename T_, __nv_fp8_interpretation_t kFormat, bool kColumnSums, GeluFold kGelu>
__global__ void __launch_bounds__(kThreads, kGelu != GeluFold::kNone || kColumnSums ? 3 : 4)
    fp8_cast_transpose_kernel(const __grid_constant__ CastLaunch<T_> launch) {
  __shared__ __align__(16) uint8_t tile[kTileBytes];
  __shared__ float warp_column_sums[kColumnSums ? kWarps : 1][kTileCols];
  __shared__ float reduce_scratch[32];
  int j = 0;
  while (j + 1 < launch.count && blockIdx.x >= launch.first_tile[j + 1]) ++j;
  const CastJob<T_>& shape = launch.jobs[j];
  const Fp8CastJob<T_>& job = shape.job;
  const T_* in = job.in;
  const Fp8CastFusion<T_>& fusion = job.fusion;
  const T_* gelu_input = kGelu == GeluFold::kBackward ? fusion.gelu_input : nullptr;
  const bool gelu_forward = kGelu == GeluFold::kForward && fusion.gelu_forward;
  uint8_t* out = job.out;
  uint8_t* out_t = job.out_t;
  const int64_t rows = job.rows, cols = job.cols;
  const int64_t tiles_x = ceil_div(cols, kTileCols);  // this job's tiles, row after row
  const int64_t tile_index = blockIdx.x - launch.first_tile[j];
  const int64_t tile_row = tile_index / tiles_x;
  const int64_t row0 = tile_row * kTileRows;
  const int64_t col0 = tile_index % tiles_x * kTileCols;
  const float s = *job.scale;
  float largest = 0.0f;
  float column_sums[kColumnSums ? kRun : 1] = {};
  constexpr int kRunsPerRow = kTileCols / kRun;
  const bool whole_tile = row0 + kTileRows <= rows && col0 + kTileCols <= cols;
  const bool fast = whole_tile && shape.vector_in &&
                    (gelu_input == nullptr || shape.vector_gelu) &&
                    (out == nullptr || shape.vector_out);
  if (fast)
    cast_whole_tile<T_, kFormat, kColumnSums, kGelu>(job, row0, col0, s, tile, largest,
                                                     column_sums);
  for (int i = fast ? kTileRows * kRunsPerRow : threadIdx.x; i < kTileRows * kRunsPerRow;
       i += kThreads) {
    const int r = i / kRunsPerRow, c = (i % kRunsPerRow) * kRun;
    const int64_t row = row0 + r, col = col0 + c;
    __align__(8) uint8_t codes[kRun] = {};
    if (row < rows && col < cols) {
      const int64_t valid = cols - col;
      float x[kRun];
      load_values(in + row * cols + col, shape.vector_in, valid, x);
      if (gelu_input != nullptr) {
        float pre[kRun];
        load_values(gelu_input + row * cols + col, shape.vector_gelu, valid, pre);
        fold_gelu_backward<T_>(x, pre);
      }
      if (gelu_forward) fold_gelu_forward<T_>(x);
      account_run<kColumnSums>(x, largest, column_sums);
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
    if (whole_tile && shape.vector_out_t) {
      store_transposed_whole(tile, out_t, rows, row0, col0);
    } else {
      store_transposed_ragged(tile, out_t, rows, cols, row0, col0, shape.vector_out_t);
    }
  }
  if constexpr (kColumnSums) {
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
        fusion.column_partials[tile_row * cols + col0 + threadIdx.x] = total;
      }
    }
  }
  if (job.amax != nullptr) raise_block_amax(largest, job.amax, reduce_scratch);
}

/// fp8_transpose's load phase for a whole tile (every row and column inside, `in` 16-byte
/// aligned with whole chunks): the general loop's chunks, addresses stepped, no bounds checks.
/// Thread t's chunks are columns (t % 8) * 16 + [0, 16) of rows t / 8 and t / 8 + 64.
__device__ __forceinline__ void load_whole_code_tile(const uint8_t* in, int64_t cols,
                                                     int64_t row0, int64_t col0, uint8_t* tile) {
  constexpr int kChunk = 16;
  constexpr int kChunksPerRow = kTileCols / kChunk;
  constexpr int kRowStep = kThreads / kChunksPerRow;
  constexpr int kTileWordStep = (kRowStep * kTileStride + kRowStep / kColumnRun * 4) / 4;
  const int r = threadIdx.x / kChunksPerRow, c = threadIdx.x % kChunksPerRow * kChunk;
  const uint8_t* src = in + (row0 + r) * cols + col0 + c;
  auto* words = reinterpret_cast<uint32_t*>(tile + tile_offset(r, c));
#pragma unroll
  for (int k = 0; k < kTileRows / kRowStep; ++k) {
    const uint4 chunk = *reinterpret_cast<const uint4*>(src + k * kRowStep * cols);
    words[k * kTileWordStep] = chunk.x;
    words[k * kTileWordStep + 1] = chunk.y;
    words[k * kTileWordStep + 2] = chunk.z;
    words[k * kTileWordStep + 3] = chunk.w;
  }
}

/// fp8_transpose: a block per 128 x 128 tile, the rows' codes into the code tile 16 bytes a
/// thread (four conflict-free word stores), then the cast's transposed stores.
__global__ void __launch_bounds__(kThreads)
    fp8_transpose_kernel(const uint8_t* in, const int64_t rows, const int64_t cols,
                         uint8_t* out_t, const bool vector_in, const bool vector_out_t) {
  __shared__ __align__(16) uint8_t tile[kTileBytes];
  constexpr int kChunk = 16;
  constexpr int kChunksPerRow = kTileCols / kChunk;
  const auto tiles_x = static_cast<uint32_t>(ceil_div(cols, kTileCols));  // < 2^31 tiles
  const int64_t row0 = static_cast<int64_t>(blockIdx.x / tiles_x) * kTileRows;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x % tiles_x) * kTileCols;
  const bool whole_tile = row0 + kTileRows <= rows && col0 + kTileCols <= cols;
  if (whole_tile && vector_in) load_whole_code_tile(in, cols, row0, col0, tile);
  for (int i = whole_tile && vector_in ? kTileRows * kChunksPerRow : threadIdx.x;
       i < kTileRows * kChunksPerRow; i += kThreads) {
    const int r = i / kChunksPerRow, c = (i % kChunksPerRow) * kChunk;
    const int64_t row = row0 + r, col = col0 + c;
    uint4 chunk = make_uint4(0, 0, 0, 0);
    if (row < rows && col < cols) {
      if (vector_in && col + kChunk <= cols) {
        chunk = *reinterpret_cast<const uint4*>(in + row * cols + col);
      } else {
        auto* bytes = reinterpret_cast<uint8_t*>(&chunk);
        for (int j = 0; j < kChunk && col + j < cols; ++j) bytes[j] = in[row * cols + col + j];
      }
    }
    *reinterpret_cast<uint32_t*>(&tile[tile_offset(r, c)]) = chunk.x;
    *reinterpret_cast<uint32_t*>(&tile[tile_offset(r, c + 4)]) = chunk.y;
    *reinterpret_cast<uint32_t*>(&tile[tile_offset(r, c + 8)]) = chunk.z;
    *reinterpret_cast<uint32_t*>(&tile[tile_offset(r, c + 12)]) = chunk.w;
  }
  __syncthreads();
  if (whole_tile && vector_out_t) {
    store_transposed_whole(tile, out_t, rows, row0, col0);
  } else {
    store_transposed_ragged(tile, out_t, rows, cols, row0, col0, vector_out_t);
  }
}

template <typename T_>
CastJob<T_> checked_job(const Fp8CastJob<T_>& job) {
  GPT2_CHECK(job.rows >= 0 && job.cols >= 0, "an fp8 cast of ", job.rows, " x ", job.cols);
  GPT2_CHECK(job.scale != nullptr, "an fp8 cast needs a scale");
  GPT2_CHECK(!job.fusion.gelu_forward ||
                 (job.fusion.gelu_input == nullptr && job.fusion.column_partials == nullptr),
             "an fp8 cast folding in a GELU forward takes no GELU input and no column sums");
  const bool whole_runs = job.cols % kRun == 0;
  return {job, whole_runs && alignment_bytes(job.in) >= 16,
          whole_runs && alignment_bytes(job.fusion.gelu_input) >= 16,
          whole_runs && alignment_bytes(job.out) >= 8,
          job.rows % kColumnRun == 0 && alignment_bytes(job.out_t) >= 16};
}

template <typename T_, __nv_fp8_interpretation_t kFormat>
void launch_group(const Fp8CastJob<T_>* jobs, int count, cudaStream_t stream) {
  CastLaunch<T_> launch{};
  int64_t tiles = 0;
  auto flush = [&] {
    if (launch.count == 0) return;
    GPT2_CHECK(tiles < (int64_t{1} << 31), "an fp8 cast of ", tiles, " tiles exceeds the grid");
    bool column_sums = false, gelu_backward = false, gelu_forward = false;
    for (int i = 0; i < launch.count; ++i) {
      const Fp8CastFusion<T_>& fusion = launch.jobs[i].job.fusion;
      column_sums = column_sums || fusion.column_partials != nullptr;
      gelu_backward = gelu_backward || fusion.gelu_input != nullptr;
      gelu_forward = gelu_forward || fusion.gelu_forward;
    }
    GPT2_CHECK(!(gelu_backward && gelu_forward),
               "one fp8 cast launch folds in either GELU's backward or its forward");
    const unsigned blocks = static_cast<unsigned>(tiles);
    auto run = [&](auto sums, auto gelu) {
      fp8_cast_transpose_kernel<T_, kFormat, decltype(sums)::value, decltype(gelu)::value>
          <<<blocks, kThreads, 0, stream>>>(launch);
    };
    using Backward = std::integral_constant<GeluFold, GeluFold::kBackward>;
    using Forward = std::integral_constant<GeluFold, GeluFold::kForward>;
    using NoGelu = std::integral_constant<GeluFold, GeluFold::kNone>;
    if (column_sums && gelu_backward) {
      run(std::true_type{}, Backward{});
    } else if (column_sums) {
      run(std::true_type{}, NoGelu{});
    } else if (gelu_backward) {
      run(std::false_type{}, Backward{});
    } else if (gelu_forward) {
      run(std::false_type{}, Forward{});
    } else {
      run(std::false_type{}, NoGelu{});
    }
    GPT2_CUDA_CHECK_LAUNCH();
    launch.count = 0;
    tiles = 0;
  };
  for (int i = 0; i < count; ++i) {
    const CastJob<T_> job = checked_job(jobs[i]);
    const int64_t job_tiles = ceil_div(job.job.rows, kTileRows) * ceil_div(job.job.cols, kTileCols);
    if (job_tiles == 0) continue;
    launch.first_tile[launch.count] = tiles;
    launch.jobs[launch.count++] = job;
    tiles += job_tiles;
    launch.first_tile[launch.count] = tiles;
    if (launch.count == kFp8CastJobsPerLaunch) flush();
  }
  flush();
}

}  // namespace

template <typename T_>
void fp8_cast_transpose_group(const Fp8CastJob<T_>* jobs, int count, cpu::Fp8Format format,
                              cudaStream_t stream) {
  GPT2_CHECK(count >= 0 && (count == 0 || jobs != nullptr), "an fp8 cast of ", count, " jobs");
  if (format == cpu::Fp8Format::kE4M3) {
    launch_group<T_, __NV_E4M3>(jobs, count, stream);
  } else {
    launch_group<T_, __NV_E5M2>(jobs, count, stream);
  }
}

void fp8_transpose(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out_t,
                   cudaStream_t stream) {
  GPT2_CHECK(rows >= 0 && cols >= 0, "an fp8 transpose of ", rows, " x ", cols);
  GPT2_CHECK(in != nullptr && out_t != nullptr, "an fp8 transpose without its tensors");
  const int64_t tiles = ceil_div(rows, kTileRows) * ceil_div(cols, kTileCols);
  if (tiles == 0) return;
  GPT2_CHECK(tiles < (int64_t{1} << 31), "an fp8 transpose of ", tiles, " tiles exceeds the grid");
  fp8_transpose_kernel<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
      in, rows, cols, out_t, cols % 16 == 0 && alignment_bytes(in) >= 16,
      rows % kColumnRun == 0 && alignment_bytes(out_t) >= 16);
  GPT2_CUDA_CHECK_LAUNCH();
}

template <typename T_>
void fp8_cast_transpose(const T_* in, int64_t rows, int64_t cols, const float* scale,
                        cpu::Fp8Format format, uint8_t* out, uint8_t* out_t, float* amax,
                        cudaStream_t stream, const Fp8CastFusion<T_>& fusion) {
  const Fp8CastJob<T_> job{in, rows, cols, scale, out, out_t, amax, fusion};
  fp8_cast_transpose_group(&job, 1, format, stream);
}

template void fp8_cast_transpose<float>(const float*, int64_t, int64_t, const float*,
                                        cpu::Fp8Format, uint8_t*, uint8_t*, float*, cudaStream_t,
                                        const Fp8CastFusion<float>&);
template void fp8_cast_transpose<__nv_bfloat16>(const __nv_bfloat16*, int64_t, int64_t,
                                                const float*, cpu::Fp8Format, uint8_t*, uint8_t*,
                                                float*, cudaStream_t,
                                                const Fp8CastFusion<__nv_bfloat16>&);
template void fp8_cast_transpose_group<float>(const Fp8CastJob<float>*, int, cpu::Fp8Format,
                                              cudaStream_t);
template void fp8_cast_transpose_group<__nv_bfloat16>(const Fp8CastJob<__nv_bfloat16>*, int,
                                                      cpu::Fp8Format, cudaStream_t);

}  // namespace gpt2::gpu
