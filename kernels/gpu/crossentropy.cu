/**
 * @file crossentropy.cu
 * @brief Cross-entropy forward (losses only), backward (softmax recomputed, in place allowed)
 *        and both fused in place; see crossentropy.cuh.
 */
#include "kernels/gpu/crossentropy.cuh"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "kernels/gpu/common.cuh"
#include "kernels/gpu/fp8_device.cuh"
#include "kernels/gpu/mma_primitives.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kThreads = 1024;

struct RowSoftmax {
  float max;
  float sum;  // sum of exp(logit - max) over the V real columns
};

// exp(d) for d = x - max <= 0 as 2^(d log2 e): the hardware's exp2 (2 ulp) after one rounding
// of the argument, |d| u32 like expf's own, in 3 instructions instead of expf's ~10 (the
// cross-entropy kernels compute two per logit and are as much compute as memory bound).
__device__ __forceinline__ float exp_of_difference(float d) {
  constexpr float kLog2e = 1.4426950408889634f;
  return exp2f(d * kLog2e);
}

/// True when rows can be read and written as 16-byte packs.
template <typename T_>
bool packed_rows(int Vp, const void* a, const void* b) {
  return Vp % Pack16<T_>::kSize == 0 && is_aligned16(a) && is_aligned16(b);
}

/// Calls f(value) for each of the row's first V values this thread takes: 16-byte packs of the
/// first V/kPack*kPack columns when `packed`, then the tail, one element at a time; the same
/// elements in the same order on every run.
template <typename T_, typename F_>
__device__ __forceinline__ void for_each_own_logit(const T_* row, int V, bool packed, F_&& f) {
  constexpr int kPack = Pack16<T_>::kSize;
  int scalar_begin = 0;
  if (packed) {
    const int full_packs = V / kPack;
    for (int p = threadIdx.x; p < full_packs; p += blockDim.x) {
      const Pack16<T_> pack = load_pack16(row + static_cast<int64_t>(p) * kPack);
#pragma unroll
      for (int j = 0; j < kPack; ++j) f(to_float(pack.values[j]));
    }
    scalar_begin = full_packs * kPack;
  }
  for (int v = scalar_begin + threadIdx.x; v < V; v += blockDim.x) f(to_float(row[v]));
}

/// Max and sum of exponentials of one row, returned to every thread: the max (NaN logits
/// passed over), then the sum of exp(logit - max) (a NaN logit makes it NaN), each a thread's
/// own elements in order, then an xor butterfly and the warps in order: the same result on
/// every run. scratch: 2 x 32 floats; the caller puts a barrier between two calls.
template <typename T_>
__device__ RowSoftmax row_softmax_stats(const T_* row, int V, bool packed, float* scratch) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warps = static_cast<int>(blockDim.x / 32);
  float max = -INFINITY;
  for_each_own_logit(row, V, packed, [&](float x) { max = fmaxf(max, x); });
  max = warp_reduce_max(max);
  if (lane == 0) scratch[warp] = max;
  __syncthreads();
  max = lane < warps ? scratch[lane] : -INFINITY;
  max = warp_reduce_max(max);
  float sum = 0.0f;
  for_each_own_logit(row, V, packed, [&](float x) { sum += exp_of_difference(x - max); });
  sum = warp_reduce_sum(sum);
  if (lane == 0) scratch[32 + warp] = sum;
  __syncthreads();
  sum = 0.0f;
  for (int w = 0; w < warps; ++w) sum += scratch[32 + w];
  return {max, sum};
}

// ---------------------------------------------------------------------------------------------
// Kernels

/// One block per row.
template <typename T_>
__global__ void crossentropy_forward_kernel(float* losses, const T_* logits, const int* targets,
                                            int V, int Vp, bool packed) {
  __shared__ float scratch[64];
  const int64_t row = blockIdx.x;
  const T_* x = logits + row * Vp;
  const RowSoftmax stats = row_softmax_stats(x, V, packed, scratch);
  if (threadIdx.x == 0) {
    const int target = targets[row];
    losses[row] = (target >= 0 && target < V)
                      ? logf(stats.sum) + stats.max - to_float(x[target])
                      : NAN;
  }
}

/// Where a row's gradient codes go (crossentropy_forward_backward with codes): E5M2 codes of
/// the row's dlogits (as rounded to T_) times *scale, and the row's largest finite |dlogit|.
struct RowCodes {
  uint8_t* codes = nullptr;  // the row's Vp codes; null: none wanted
  float scale = 1.0f;
  float largest = 0.0f;
  bool track_largest = false;  // `largest` wanted (an amax to raise)
  bool only = false;  // the codes alone: the dlogits themselves not written
};

/// Row `row`'s part of a Fp8Destination (none when codes.rows is null).
__device__ __forceinline__ RowCodes row_codes_of(const Fp8Destination& codes, int64_t row,
                                                 int Vp, bool codes_only) {
  RowCodes row_codes;
  if (codes.rows != nullptr) {
    row_codes.codes = codes.rows + row * Vp;
    row_codes.scale = *codes.scale;
    row_codes.track_largest = codes.amax != nullptr;
    row_codes.only = codes_only;
  }
  return row_codes;
}

/// Writes one row of dlogits = (softmax - onehot(target)) * dloss, 0 in the padding columns,
/// from the row's softmax statistics, and with codes.codes set their E5M2 codes. Each thread
/// reads only the logits it then overwrites, so dx may alias x once every other read of the
/// row is behind a barrier.
template <typename T_>
__device__ void write_dlogits_row(T_* dx, const T_* x, const RowSoftmax& stats, int target,
                                  float dloss, int V, int Vp, bool packed, RowCodes& codes) {
  constexpr int kPack = Pack16<T_>::kSize;
  const float inv_sum = 1.0f / stats.sum;
  auto gradient = [&](int v, float logit) {
    if (v >= V) return 0.0f;  // padding columns
    const float prob = exp_of_difference(logit - stats.max) * inv_sum;
    return (prob - (v == target ? 1.0f : 0.0f)) * dloss;
  };
  if (packed) {
    for (int p = threadIdx.x; p < Vp / kPack; p += blockDim.x) {
      const Pack16<T_> in = load_pack16(x + static_cast<int64_t>(p) * kPack);
      Pack16<T_> out;
      if ((p + 1) * kPack <= V && target / kPack != p) {
        // Neither padding nor the target in this pack: prob * dloss, which is the general
        // expression's (prob - 0) * dloss bit for bit, without its two tests an element.
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          const float prob = exp_of_difference(to_float(in.values[j]) - stats.max) * inv_sum;
          out.values[j] = from_float<T_>(prob * dloss);
        }
      } else {
#pragma unroll
        for (int j = 0; j < kPack; ++j)
          out.values[j] = from_float<T_>(gradient(p * kPack + j, to_float(in.values[j])));
      }
      if (!codes.only) store_pack16(dx + static_cast<int64_t>(p) * kPack, out);
      if (codes.codes != nullptr) {
        float values[kPack];
#pragma unroll
        for (int j = 0; j < kPack; ++j) values[j] = to_float(out.values[j]);
        if (codes.track_largest) {
#pragma unroll
          for (int j = 0; j < kPack; ++j)
            if (isfinite(values[j])) codes.largest = fmaxf(codes.largest, fabsf(values[j]));
        }
        __align__(8) uint8_t packed_codes[kPack];
        fp8_codes<__NV_E5M2>(values, codes.scale, packed_codes);
#pragma unroll
        for (int j = 0; j < kPack; j += 4)
          *reinterpret_cast<uint32_t*>(codes.codes + p * kPack + j) =
              *reinterpret_cast<const uint32_t*>(packed_codes + j);
      }
    }
  } else {
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
      const T_ rounded = from_float<T_>(gradient(v, to_float(x[v])));
      if (!codes.only) dx[v] = rounded;
      if (codes.codes != nullptr) {
        const float value = to_float(rounded);
        if (isfinite(value)) codes.largest = fmaxf(codes.largest, fabsf(value));
        codes.codes[v] = static_cast<uint8_t>(
            __nv_cvt_float_to_fp8(value * codes.scale, __NV_SATFINITE, __NV_E5M2));
      }
    }
  }
}

/// One block per row; the row's reads all finish inside row_softmax_stats (it ends with a
/// barrier) before the first write, so dlogits may alias logits.
template <typename T_>
__global__ void crossentropy_backward_kernel(T_* dlogits, const float* dlosses, const T_* logits,
                                             const int* targets, int V, int Vp, bool packed) {
  __shared__ float scratch[64];
  const int64_t row = blockIdx.x;
  const T_* x = logits + row * Vp;
  const RowSoftmax stats = row_softmax_stats(x, V, packed, scratch);
  const int target = targets[row];
  const float dloss = (target >= 0 && target < V) ? dlosses[row] : NAN;
  RowCodes no_codes;
  write_dlogits_row(dlogits + row * Vp, x, stats, target, dloss, V, Vp, packed, no_codes);
}

/// The loss and the gradient of one row whose logits `x` can be read from anywhere (global or
/// shared memory), the gradient written to `dx` (global; may be x). The body both fused kernels
/// share, so they give the same bits.
template <typename T_>
__device__ __forceinline__ void forward_backward_row(float* loss, T_* dx, const T_* x,
                                                     int target, float dloss, int V, int Vp,
                                                     bool packed, float* scratch,
                                                     RowCodes& row_codes) {
  const bool valid = target >= 0 && target < V;
  const float target_logit = (threadIdx.x == 0 && valid) ? to_float(x[target]) : 0.0f;
  const RowSoftmax stats = row_softmax_stats(x, V, packed, scratch);
  if (threadIdx.x == 0) *loss = valid ? logf(stats.sum) + stats.max - target_logit : NAN;
  write_dlogits_row(dx, x, stats, target, valid ? dloss : NAN, V, Vp, packed, row_codes);
}

/// One block per row: the loss, then the row's logits overwritten by their gradient. Thread 0
/// reads the target's logit before row_softmax_stats' barrier, so every read of the row
/// precedes every write. The loss is the same expression as crossentropy_forward_kernel's and
/// the gradient the same as crossentropy_backward_kernel's: the same bits as the pair.
/// With codes.rows set, also the gradient's E5M2 codes (row order) and, through the block's
/// largest |dlogit|, codes.amax; with codes_only as well, the logits stay unwritten.
template <typename T_>
__global__ void crossentropy_forward_backward_kernel(float* losses, T_* logits,
                                                     const int* targets, float dloss, int V,
                                                     int Vp, bool packed,
                                                     const Fp8Destination codes,
                                                     bool codes_only) {
  __shared__ float scratch[64];
  const int64_t row = blockIdx.x;
  T_* x = logits + row * Vp;
  RowCodes row_codes = row_codes_of(codes, row, Vp, codes_only);
  forward_backward_row(losses + row, x, x, targets[row], dloss, V, Vp, packed, scratch,
                       row_codes);
  // (scratch's last reader is row_softmax_stats, before a barrier the reduction repeats.)
  if (codes.amax != nullptr) raise_block_amax(row_codes.largest, codes.amax, scratch);
}

/// crossentropy_forward_backward_kernel's rows, each read from memory once: a persistent block
/// copies its row into shared memory (16-byte cp.async, each thread the packs it will itself
/// read) and computes it from there, so the row's three passes (max, sum, gradient) read shared
/// memory; two blocks an SM, so one's copy overlaps the other's arithmetic. Packed rows only
/// (Vp a multiple of the pack, 16-byte aligned); Vp elements of dynamic shared memory. The same
/// thread-to-element map and reductions as the one-row kernel: the same bits.
/// (Measured against a block that stages the next row while it computes the current one, one
/// block an SM: 393 against 404 us a gpt2-medium fp8 chunk, H100.)
template <typename T_>
__global__ void __launch_bounds__(kThreads, 2)
    crossentropy_forward_backward_staged_kernel(float* losses, T_* logits, const int* targets,
                                                float dloss, int V, int Vp, int64_t rows,
                                                const Fp8Destination codes, bool codes_only) {
  constexpr int kPack = Pack16<T_>::kSize;
  extern __shared__ float4 staged_row[];  // Vp elements
  __shared__ float scratch[64];
  T_* const stage = reinterpret_cast<T_*>(staged_row);
  const int packs = Vp / kPack;
  float largest = 0.0f;  // over this block's rows, for codes.amax
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    __syncthreads();  // every thread done with the previous row's stage
    const T_* src = logits + row * Vp;
    for (int p = threadIdx.x; p < packs; p += blockDim.x)
      mma::cp_async_16(mma::smem_addr(stage + p * kPack), src + p * kPack, true);
    mma::cp_async_commit();
    mma::cp_async_wait<0>();
    __syncthreads();  // every thread's copies visible
    RowCodes row_codes = row_codes_of(codes, row, Vp, codes_only);
    forward_backward_row(losses + row, logits + row * Vp, stage, targets[row], dloss, V, Vp,
                         /*packed=*/true, scratch, row_codes);
    largest = fmaxf(largest, row_codes.largest);
  }
  if (codes.amax != nullptr) raise_block_amax(largest, codes.amax, scratch);
}

/// Blocks of crossentropy_forward_backward_staged_kernel for `rows` rows, or 0 when its staged
/// row (shared_bytes) does not fit a block's shared memory on this device.
template <typename T_>
int staged_blocks(int64_t rows, size_t shared_bytes) {
  int device = 0, shared_optin = 0, sms = 0;
  GPT2_CUDA_CHECK(cudaGetDevice(&device));
  GPT2_CUDA_CHECK(
      cudaDeviceGetAttribute(&shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  GPT2_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const auto kernel = crossentropy_forward_backward_staged_kernel<T_>;
  cudaFuncAttributes attributes{};
  GPT2_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  if (shared_bytes + attributes.sharedSizeBytes > static_cast<size_t>(shared_optin)) return 0;
  GPT2_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shared_bytes)));
  int per_sm = 0;
  GPT2_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, shared_bytes));
  return static_cast<int>(std::min<int64_t>(rows, static_cast<int64_t>(per_sm) * sms));
}

void check_shapes(int B, int T, int V, int Vp) {
  GPT2_CHECK(B >= 1 && T >= 1, "B=", B, " T=", T);
  GPT2_CHECK(V >= 1 && Vp >= V, "V=", V, " Vp=", Vp);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

template <typename T_>
void crossentropy_forward(float* losses, const T_* logits, const int* targets, int B, int T,
                          int V, int Vp, cudaStream_t stream) {
  check_shapes(B, T, V, Vp);
  GPT2_CHECK(losses != nullptr && logits != nullptr && targets != nullptr);
  const int64_t rows = static_cast<int64_t>(B) * T;
  crossentropy_forward_kernel<<<grid_size(rows, 1), kThreads, 0, stream>>>(
      losses, logits, targets, V, Vp, packed_rows<T_>(Vp, logits, logits));
  GPT2_CUDA_CHECK_LAUNCH();
}

template <typename T_>
void crossentropy_backward(T_* dlogits, const float* dlosses, const T_* logits,
                           const int* targets, int B, int T, int V, int Vp, cudaStream_t stream) {
  check_shapes(B, T, V, Vp);
  GPT2_CHECK(dlogits != nullptr && dlosses != nullptr && logits != nullptr && targets != nullptr);
  const int64_t rows = static_cast<int64_t>(B) * T;
  crossentropy_backward_kernel<<<grid_size(rows, 1), kThreads, 0, stream>>>(
      dlogits, dlosses, logits, targets, V, Vp, packed_rows<T_>(Vp, logits, dlogits));
  GPT2_CUDA_CHECK_LAUNCH();
}

template <typename T_>
void crossentropy_forward_backward(float* losses, T_* logits, const int* targets, float dloss,
                                   int B, int T, int V, int Vp, cudaStream_t stream,
                                   const Fp8Destination& codes, bool codes_only) {
  check_shapes(B, T, V, Vp);
  GPT2_CHECK(losses != nullptr && logits != nullptr && targets != nullptr);
  GPT2_CHECK(!codes_only || codes.rows != nullptr,
             "the cross-entropy's codes alone, without a destination for them");
  if (codes.rows != nullptr) {
    GPT2_CHECK(codes.transposed == nullptr && codes.format == cpu::Fp8Format::kE5M2 &&
                   codes.scale != nullptr,
               "the cross-entropy writes its gradient's codes as E5M2 rows, with a scale");
    GPT2_CHECK(Vp % Pack16<T_>::kSize == 0 && alignment_bytes(codes.rows) >= 8,
               "the gradient's codes need Vp a multiple of ", Pack16<T_>::kSize,
               " and 8-byte aligned rows");
  }
  const int64_t rows = static_cast<int64_t>(B) * T;
  const bool packed = packed_rows<T_>(Vp, logits, logits);
  const size_t staged_bytes = static_cast<size_t>(Vp) * sizeof(T_);
  const int blocks = packed ? staged_blocks<T_>(rows, staged_bytes) : 0;
  if (blocks > 0) {
    crossentropy_forward_backward_staged_kernel<<<blocks, kThreads, staged_bytes, stream>>>(
        losses, logits, targets, dloss, V, Vp, rows, codes, codes_only);
  } else {
    crossentropy_forward_backward_kernel<<<grid_size(rows, 1), kThreads, 0, stream>>>(
        losses, logits, targets, dloss, V, Vp, packed, codes, codes_only);
  }
  GPT2_CUDA_CHECK_LAUNCH();
}

template void crossentropy_forward<float>(float*, const float*, const int*, int, int, int, int,
                                          cudaStream_t);
template void crossentropy_forward<__nv_bfloat16>(float*, const __nv_bfloat16*, const int*, int,
                                                  int, int, int, cudaStream_t);
template void crossentropy_backward<float>(float*, const float*, const float*, const int*, int,
                                           int, int, int, cudaStream_t);
template void crossentropy_backward<__nv_bfloat16>(__nv_bfloat16*, const float*,
                                                   const __nv_bfloat16*, const int*, int, int,
                                                   int, int, cudaStream_t);
template void crossentropy_forward_backward<float>(float*, float*, const int*, float, int, int,
                                                   int, int, cudaStream_t,
                                                   const Fp8Destination&, bool);
template void crossentropy_forward_backward<__nv_bfloat16>(float*, __nv_bfloat16*, const int*,
                                                           float, int, int, int, int,
                                                           cudaStream_t, const Fp8Destination&,
                                                           bool);

}  // namespace gpt2::gpu
