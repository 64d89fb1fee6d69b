/**
 * @file hopper_primitives.cuh
 * @brief Device-only wrappers of the sm_90a instructions the Hopper attention kernels are built
 * from (PTX ISA names in brackets). Include from .cu files compiled for sm_90a only.
 *
 * - mbarrier [mbarrier.*]: transaction-counting barriers in shared memory. A producer thread
 *   arms one with the bytes it expects (arrive_expect_tx), the copy engine counts them down;
 *   consumers wait on the phase parity. Empty/full rings use one barrier per stage.
 * - TMA [cp.async.bulk.tensor]: one thread copies a whole tile global -> shared, described by a
 *   CUtensorMap (kernels/gpu/tensor_map.cuh) passed as a __grid_constant__ kernel parameter.
 *   Rows outside the tensor are zero-filled on loads and left alone on stores (tma_store_3d,
 *   shared -> global, a bulk async group). [cp.async.bulk] copies contiguous bytes;
 *   [cp.reduce.async.bulk .add.f32] adds a contiguous shared fp32 range into global memory.
 * - wgmma [wgmma.mma_async]: a warpgroup (4 consecutive warps) computes D(64xN, fp32) (+)= A B.
 *   B is always a shared-memory tile given by a matrix descriptor; A is a descriptor or four
 *   bf16x2 registers per thread. Accumulator layout per thread (warp w of the warpgroup,
 *   lane = 4 g + t): d[4i + 0..1] = row 16w + g, columns 8i + 2t, +1; d[4i + 2..3] = row
 *   16w + g + 8, same columns. The register A fragment for k-slab [16kk, 16kk + 16) is the
 *   mma.sync m16n8k16 layout, i.e. the packed accumulators of n-tiles 2kk and 2kk + 1.
 * - Shared tiles for wgmma and TMA use the 128-byte swizzle: rows of 64 bf16 (128 bytes),
 *   16-byte chunk c of row r stored at chunk c ^ (r % 8); tiles start 1024-byte aligned. A
 *   K-major operand (K contiguous) advances along K by adding 32 bytes per k16 step; an
 *   MN-major operand (M or N contiguous, imm-trans = 1) advances along K by 16 rows (2048 B).
 *   Head dims of 128 are stored as two such 64-column tiles (the LBO of MN-major descriptors).
 * - stmatrix [stmatrix.sync.aligned] stores mma-layout bf16 fragments to shared memory, a
 *   16 x 16 block per instruction.
 * - setmaxnreg moves registers between producer and consumer warpgroups (the backward kernel,
 *   one block per SM: __launch_bounds__(threads, 1); the forward's shapes run 2-3 blocks per
 *   SM and use none); named barriers [bar.sync id, n] sync a subset of warps.
 */
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/gpu/wgmma_descriptor.h"

namespace gpt2::gpu::hopper {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------------------------------------
// mbarrier

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

/// Makes initialized barriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/// Blocks until the barrier's phase with the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// ---------------------------------------------------------------------------------------------
// Bulk copies (TMA)

__device__ __forceinline__ void prefetch_tensor_map(const void* tensor_map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tensor_map))
               : "memory");
}

/// Tile of a 3-D tensor map at coordinates (c0 innermost, c1, c2) into shared memory; completes
/// its bytes on `bar`.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* tensor_map, uint32_t bar,
                                            int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

/// Shared memory -> the tile of a 3-D tensor map at coordinates (c0 innermost, c1, c2), by the
/// copy engine (bulk async group). Rows outside the tensor are not written.
__device__ __forceinline__ void tma_store_3d(const void* tensor_map, uint32_t src, int c0, int c1,
                                             int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(tensor_map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

/// Contiguous global -> shared copy (bytes % 16 == 0, both addresses 16-byte aligned).
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

/// global[0..bytes) = shared[0..bytes), by the copy engine (bulk async group; bytes % 16 == 0,
/// both addresses 16-byte aligned).
__device__ __forceinline__ void bulk_store(void* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst),
               "r"(src), "r"(bytes)
               : "memory");
}

/// global[0..bytes) += shared[0..bytes) as fp32, by the copy engine (bulk async group).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
      "r"(src), "r"(bytes)
      : "memory");
}

__device__ __forceinline__ void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/// Waits until at most kPending bulk groups of this thread are still reading shared memory.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

/// Waits until at most kPending bulk groups of this thread are incomplete (writes performed).
template <int kPending>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

/// Orders this thread's global-memory accesses through the generic proxy (loads, atomics) and
/// through the async proxy (bulk copies) with each other, both ways.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

/// Orders this thread's ordinary shared-memory stores before later async-proxy reads of them
/// (wgmma operands, bulk copies out of shared memory).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---------------------------------------------------------------------------------------------
// Warp specialization

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

/// Barrier among `threads` threads (a multiple of 32) on hardware barrier `id` (1..15; 0 is
/// __syncthreads).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// Arrival on named barrier `id` without waiting (the other `threads` - this warp's wait in
/// named_barrier_sync).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---------------------------------------------------------------------------------------------
// wgmma

// smem_descriptor and descriptor_moved: wgmma_descriptor.h (host code too, for its tests).

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int kPending>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

/// Keeps the compiler from moving accesses of accumulator registers across wgmma issue/wait.
template <int kCount>
__device__ __forceinline__ void fence_operands(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int kCount>
__device__ __forceinline__ void fence_operands(uint32_t (&r)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

#define GPT2_WGMMA_ACC64                   \
  "{"                                      \
  "%0, %1, %2, %3, %4, %5, %6, %7, "       \
  "%8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31" \
  "}"

#define GPT2_WGMMA_ACC128                    \
  "{"                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, "         \
  "%8, %9, %10, %11, %12, %13, %14, %15, "   \
  "%16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, " \
  "%40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, " \
  "%56, %57, %58, %59, %60, %61, %62, %63"   \
  "}"

#define GPT2_F8(d, i)                                                                      \
  "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), \
      "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define GPT2_F32(d) GPT2_F8(d, 0), GPT2_F8(d, 8), GPT2_F8(d, 16), GPT2_F8(d, 24)
#define GPT2_F64(d) GPT2_F32(d), GPT2_F8(d, 32), GPT2_F8(d, 40), GPT2_F8(d, 48), GPT2_F8(d, 56)

/// D(64 x N) (+)= A(64 x 16) B(16 x N), A and B in shared memory (descriptors). kTransA/B = 1:
/// the operand is MN-major. accumulate = false overwrites D.
template <int N, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b,
                                         bool accumulate);

template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_64(float (&d)[32], uint64_t a, uint64_t b,
                                            bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " GPT2_WGMMA_ACC64
      ", %32, %33, p, 1, 1, %35, %36;\n}\n"
      : GPT2_F32(d)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransA), "n"(kTransB));
}

template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_128(float (&d)[64], uint64_t a, uint64_t b,
                                             bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " GPT2_WGMMA_ACC128
      ", %64, %65, p, 1, 1, %67, %68;\n}\n"
      : GPT2_F64(d)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransA), "n"(kTransB));
}

/// D(64 x N) (+)= A(64 x 16, registers) B(16 x N, shared descriptor).
template <int kTransB>
__device__ __forceinline__ void wgmma_rs_64(float (&d)[32], const uint32_t (&a)[4], uint64_t b,
                                            bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " GPT2_WGMMA_ACC64
      ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : GPT2_F32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)),
        "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs_128(float (&d)[64], const uint32_t (&a)[4], uint64_t b,
                                             bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " GPT2_WGMMA_ACC128
      ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : GPT2_F64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)),
        "n"(kTransB));
}

#undef GPT2_F8
#undef GPT2_F32
#undef GPT2_F64
#undef GPT2_WGMMA_ACC64
#undef GPT2_WGMMA_ACC128

/// Shape-generic front ends: N = 64 or 128.
template <int N, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b,
                                         bool accumulate) {
  static_assert(N == 64 || N == 128, "wgmma_ss: N is 64 or 128");
  if constexpr (N == 64) {
    wgmma_ss_64<kTransA, kTransB>(d, a, b, accumulate);
  } else {
    wgmma_ss_128<kTransA, kTransB>(d, a, b, accumulate);
  }
}

template <int N, int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b,
                                         bool accumulate) {
  static_assert(N == 64 || N == 128, "wgmma_rs: N is 64 or 128");
  if constexpr (N == 64) {
    wgmma_rs_64<kTransB>(d, a, b, accumulate);
  } else {
    wgmma_rs_128<kTransB>(d, a, b, accumulate);
  }
}

/// Stores four 8 x 8 bf16 matrices [stmatrix.m8n8.x4]: register i of each thread (lane = 4 g + t)
/// holds row g, columns 2t and 2t + 1 of matrix i, and lane l gives the shared address of row
/// l % 8 of matrix l / 8. With the matrices ordered (rows 0-7, 8-15) x (columns 0-7, 8-15) of a
/// 16 x 16 block, the registers are exactly a register A fragment (accumulators_to_a_fragment).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

/// 16 bytes of shared memory (16-byte aligned) at a shared-window address.
__device__ __forceinline__ uint4 ld_shared_16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

/// Two floats to a bf16x2 register (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

/// Register A fragment of k-slab kk (16 columns) from fp32 accumulators in wgmma layout.
template <int kCount>
__device__ __forceinline__ void accumulators_to_a_fragment(uint32_t (&frag)[4],
                                                           const float (&acc)[kCount], int kk) {
  const float* lo = acc + 8 * kk;  // n-tile 2kk
  const float* hi = lo + 4;        // n-tile 2kk + 1
  frag[0] = pack_bf16x2(lo[0], lo[1]);
  frag[1] = pack_bf16x2(lo[2], lo[3]);
  frag[2] = pack_bf16x2(hi[0], hi[1]);
  frag[3] = pack_bf16x2(hi[2], hi[3]);
}

}  // namespace gpt2::gpu::hopper
