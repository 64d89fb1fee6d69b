/**
 * @file wgmma_descriptor.h
 * @brief wgmma shared-memory matrix descriptors of 128-byte-swizzled tiles (the Hopper attention
 * kernels' SmemTile), as plain arithmetic: host and device code (plain C++ when not compiled by
 * nvcc), so that their invariants are tested on the host.
 *
 * A descriptor's fields (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start address / 16,
 * 16-29 the leading byte offset / 16, 32-45 the stride byte offset / 16, bits 62-63 the swizzle
 * mode (1: 128 bytes). Shared-memory addresses stay below 2^18 (228 KB a block on sm_90), so the
 * start field never carries: a sub-tile's descriptor is its tile's plus the offset / 16 in the
 * low word (descriptor_moved), one add in place of the masks and shifts of a new descriptor.
 */
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define GPT2_DESCRIPTOR_FN __host__ __device__ __forceinline__
#else
#define GPT2_DESCRIPTOR_FN inline
#endif

namespace gpt2::gpu::hopper {

/// Shared-memory bytes below which descriptor_moved is exact (2^18 = 256 KB: the start field's
/// 14 bits of 16-byte units).
constexpr uint32_t kDescriptorAddressLimit = uint32_t{1} << 18;

/// Descriptor of a 128-byte-swizzled shared tile at shared address addr. lbo: bytes between
/// 64-column groups of an MN-major operand (unused for K-major); sbo: bytes between groups of 8
/// rows (1024 here).
GPT2_DESCRIPTOR_FN uint64_t smem_descriptor(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32) | (uint64_t{1} << 62);
}

/// desc moved `bytes` further in shared memory (a multiple of 16): the same descriptor as
/// smem_descriptor at the moved address while that stays below kDescriptorAddressLimit. One add
/// of the low word in place of a descriptor's masks and shifts at every wgmma (the backward
/// issued 16 instructions a wgmma that way: bench/NOTES.md, session eighteen).
GPT2_DESCRIPTOR_FN uint64_t descriptor_moved(uint64_t desc, uint32_t bytes) {
  const uint32_t low = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | low;
}

}  // namespace gpt2::gpu::hopper
