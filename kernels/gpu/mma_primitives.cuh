/**
 * @file mma_primitives.cuh
 * @brief Device-only wrappers of the sm_80+ instructions the flash kernels are built from:
 * cp.async (16-byte global->shared copies, zero-fill when the source row is out of range),
 * ldmatrix (8x8 b16 tiles from shared memory into mma fragments, plain and transposed) and
 * mma.sync m16n8k16 bf16 x bf16 -> fp32. Include from .cu files only.
 *
 * Fragment layouts (lane = 32*warp + l, g = l/4, t = l%4), PTX ISA "mma.m16n8k16":
 *   A (16x16, row):  a0a1 (g, 2t..2t+1)  a2a3 (g+8, 2t..)  a4a5 (g, 8+2t..)  a6a7 (g+8, 8+2t..)
 *   B (16x8, col):   b0b1 (k=2t..2t+1, n=g)  b2b3 (k=8+2t.., n=g)
 *   C (16x8, fp32):  c0c1 (g, 2t..2t+1)  c2c3 (g+8, 2t..2t+1)
 * so the C fragments of two adjacent 16x8 tiles, packed to bf16, are exactly the A fragment of
 * the 16x16 tile they form: P never leaves registers between the two GEMMs of attention.
 *
 * Shared-memory tiles are rows of kRowChunks 16-byte chunks stored with an XOR swizzle
 * (chunk ^ (row % 8)), so the 8 row addresses of one ldmatrix hit 8 different bank groups.
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

namespace gpt2::gpu::mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16-byte async copy; when !valid nothing is read and the destination is zero-filled.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// d += a * b  (16x16 bf16 row-major A, 16x8 bf16 col-major B, fp32 accumulators).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Two floats to a bf16x2 register, round to nearest even; lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

/// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile of kRowChunks
/// chunks per row. Any 8 consecutive rows at one logical chunk land in 8 distinct 16-byte
/// slots of a 128-byte bank line: rows of >= 8 chunks XOR the chunk with row % 8; shorter rows
/// (4 or 2 chunks, several rows per 128 bytes) XOR it with the row's index within its group.
template <int kRowChunks>
__device__ __forceinline__ uint32_t swizzled_offset(int row, int chunk) {
  static_assert(kRowChunks == 2 || kRowChunks == 4 || kRowChunks % 8 == 0,
                "rows must be 32, 64 or a multiple of 128 bytes");
  constexpr int kRowsPerLine = kRowChunks >= 8 ? 1 : 8 / kRowChunks;
  constexpr int kMask = kRowChunks >= 8 ? 7 : kRowChunks - 1;
  const int swizzled = chunk ^ ((row / kRowsPerLine) & kMask);
  return static_cast<uint32_t>((row * kRowChunks + swizzled) * 16);
}

}  // namespace gpt2::gpu::mma
