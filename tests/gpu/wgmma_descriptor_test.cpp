// wgmma shared-memory descriptors (kernels/gpu/wgmma_descriptor.h), on the CPU: the fields, and
// descriptor_moved giving smem_descriptor's value at the moved address wherever the Hopper
// kernels' tiles can sit (below 2^18), which the kernels' one-add sub-tile descriptors rely on.
#include "kernels/gpu/wgmma_descriptor.h"

#include <cstdint>

#include <gtest/gtest.h>

namespace gpt2::gpu::test {
namespace {

using hopper::descriptor_moved;
using hopper::kDescriptorAddressLimit;
using hopper::smem_descriptor;

TEST(WgmmaDescriptor, FieldsInSixteenByteUnits) {
  const uint64_t desc = smem_descriptor(0x2400, 16, 1024);
  EXPECT_EQ(desc & 0x3FFF, 0x2400u / 16);            // start address
  EXPECT_EQ((desc >> 16) & 0x3FFF, 1u);              // leading byte offset
  EXPECT_EQ((desc >> 32) & 0x3FFF, 1024u / 16);      // stride byte offset
  EXPECT_EQ(desc >> 62, 1u);                         // 128-byte swizzle
  EXPECT_EQ(desc & 0x3FFFC000C000C000ull, 0u);       // nothing else set
}

TEST(WgmmaDescriptor, MovedEqualsBuiltAtTheMovedAddressBelowTheLimit) {
  // Every 1024-byte aligned tile base (as TMA and the swizzle need) and every 16-byte offset
  // from it that stays below the limit, for the leading offsets the tiles use (K-major 16;
  // MN-major, a column block of 64 and of 128 rows).
  static_assert(228 * 1024 <= kDescriptorAddressLimit, "sm_90's shared memory fits the field");
  for (const uint32_t lbo : {16u, 64u * 128u, 128u * 128u}) {
    int64_t mismatches = 0, checked = 0;
    for (uint32_t base = 0; base < kDescriptorAddressLimit; base += 1024) {
      const uint64_t tile = smem_descriptor(base, lbo, 1024);
      for (uint32_t offset = 0; base + offset < kDescriptorAddressLimit; offset += 16) {
        mismatches += descriptor_moved(tile, offset) != smem_descriptor(base + offset, lbo, 1024);
        ++checked;
      }
    }
    EXPECT_EQ(mismatches, 0) << "lbo " << lbo << ", " << checked << " checked";
    EXPECT_GT(checked, int64_t{1} << 21);
  }
}

TEST(WgmmaDescriptor, TheLimitIsReal) {
  // Past 2^18 the built descriptor wraps (the address is masked to 18 bits), the moved one
  // carries into the next field: the precondition is needed.
  const uint32_t last = kDescriptorAddressLimit - 16;
  EXPECT_NE(descriptor_moved(smem_descriptor(last, 16, 1024), 16),
            smem_descriptor(last + 16, 16, 1024));
}

}  // namespace
}  // namespace gpt2::gpu::test
