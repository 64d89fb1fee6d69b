/**
 * @file row_copy.cu
 * @brief gpu::copy_rows (row_copy.cuh): one thread per element, or per 16-byte pack.
 */
#include "kernels/gpu/row_copy.cuh"

#include <cstdint>

#include <cuda_bf16.h>

#include "base/error.h"
#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {
namespace {

// Element e of the copy in units of Unit (an element or a 16-byte pack): the RowCopy's sizes
// are given in those units by the caller.
template <typename Unit, bool kAdd>
__global__ void copy_rows_kernel(Unit* dst, const Unit* src, RowCopy c) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_sequence = c.rows * c.width;
  if (e >= c.outer * per_sequence) return;
  const int64_t r = e / per_sequence;
  const int64_t i = e % per_sequence / c.width;
  const int64_t w = e % c.width;
  const int64_t d_row = c.dst.positions ? c.dst.positions[i] : i;
  const int64_t s_row = c.src.positions ? c.src.positions[i] : i;
  Unit& d = dst[(r * c.dst.seq + d_row) * c.dst.stride + c.dst.col + w];
  const Unit s = src[(r * c.src.seq + s_row) * c.src.stride + c.src.col + w];
  if constexpr (kAdd) {
    d = from_float<Unit>(to_float(d) + to_float(s));
  } else {
    d = s;
  }
}

template <typename Unit, bool kAdd>
void launch(void* dst, const void* src, const RowCopy& c, cudaStream_t stream) {
  const int64_t n = c.outer * c.rows * c.width;
  if (n == 0) return;
  constexpr int kThreads = 256;
  copy_rows_kernel<Unit, kAdd><<<grid_size(n, kThreads), kThreads, 0, stream>>>(
      static_cast<Unit*>(dst), static_cast<const Unit*>(src), c);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T_>
void copy_rows(T_* dst, const T_* src, const RowCopy& copy, cudaStream_t stream) {
  GPT2_CHECK(copy.outer >= 0 && copy.rows >= 0 && copy.width >= 0, "a row copy of negative size");
  if (copy.add) return launch<T_, true>(dst, src, copy, stream);
  constexpr int64_t kPack = 16 / sizeof(T_);
  const bool packed =
      copy.width % kPack == 0 && copy.dst.stride % kPack == 0 && copy.src.stride % kPack == 0 &&
      copy.dst.col % kPack == 0 && copy.src.col % kPack == 0 &&
      reinterpret_cast<uintptr_t>(dst) % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
  if (!packed) return launch<T_, false>(dst, src, copy, stream);
  RowCopy packs = copy;
  packs.width /= kPack;
  packs.dst.stride /= kPack;
  packs.src.stride /= kPack;
  packs.dst.col /= kPack;
  packs.src.col /= kPack;
  launch<int4, false>(dst, src, packs, stream);
}

template void copy_rows<float>(float*, const float*, const RowCopy&, cudaStream_t);
template void copy_rows<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, const RowCopy&,
                                       cudaStream_t);

}  // namespace gpt2::gpu
