// ShardPlan: buckets cover the flat buffer in order, every size a multiple of the world size;
// the ranks' blocks cover [0, N) exactly once; a rank's local state is its blocks back to back;
// only the last bucket is padded, by less than the world size.
#include "parallel/shard_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/error.h"

namespace gpt2 {
namespace {

void expect_consistent(size_t n, int world, size_t bucket_elements) {
  SCOPED_TRACE(::testing::Message() << "N=" << n << " world=" << world
                                    << " bucket_elements=" << bucket_elements);
  std::vector<int> owners(n, 0);
  for (int rank = 0; rank < world; ++rank) {
    const ShardPlan plan(n, world, rank, bucket_elements);
    ASSERT_EQ(plan.num_elements(), n);
    size_t begin = 0, local = 0;
    for (size_t k = 0; k < plan.buckets().size(); ++k) {
      const GradientBucket& bucket = plan.buckets()[k];
      EXPECT_EQ(bucket.begin, begin);
      EXPECT_EQ(bucket.size % static_cast<size_t>(world), 0u);
      EXPECT_EQ(bucket.shard * static_cast<size_t>(world), bucket.size);
      EXPECT_EQ(bucket.local_begin, local);
      EXPECT_LE(bucket.valid, bucket.size);
      if (k + 1 < plan.buckets().size()) {
        EXPECT_EQ(bucket.valid, bucket.size);  // only the last bucket is padded
        EXPECT_LE(bucket.size, std::max(bucket_elements, static_cast<size_t>(world)));
      } else {
        EXPECT_EQ(bucket.begin + bucket.valid, n);
        EXPECT_LT(bucket.size - bucket.valid, static_cast<size_t>(world));
      }
      const ShardRange range = plan.local_range(k);
      EXPECT_EQ(range.begin, bucket.begin + rank * bucket.shard);
      EXPECT_EQ(range.local, bucket.local_begin);
      EXPECT_LE(range.count, bucket.shard);
      for (size_t i = range.begin; i < range.begin + range.count; ++i) ++owners[i];
      begin += bucket.size;
      local += bucket.shard;
    }
    EXPECT_EQ(plan.padded_elements(), begin);
    EXPECT_EQ(plan.local_elements(), local);
    EXPECT_GE(plan.padded_elements(), n);
  }
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(owners[i], 1) << "element " << i;
}

TEST(ShardPlan, BlocksCoverEveryElementOnceForOddSizes) {
  for (const size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{64}, size_t{1000}, size_t{4099}})
    for (const int world : {1, 2, 3, 4, 8})
      for (const size_t bucket : {size_t{1}, size_t{5}, size_t{16}, size_t{1000}, size_t{1} << 20})
        expect_consistent(n, world, bucket);
}

TEST(ShardPlan, WorldSizeOneIsTheWholeBufferInBuckets) {
  const ShardPlan plan(2500, 1, 0, 1000);
  ASSERT_EQ(plan.buckets().size(), 3u);
  EXPECT_EQ(plan.padded_elements(), 2500u);
  EXPECT_EQ(plan.local_elements(), 2500u);
  EXPECT_EQ(plan.buckets()[2].size, 500u);
  EXPECT_EQ(plan.max_bucket_size(), 1000u);
}

TEST(ShardPlan, BucketsAreRoundedToTheWorldSize) {
  // 10 elements, world 3, buckets of 4 -> 3: [0,3) [3,6) [6,9) [9,12) with 2 padding elements.
  const ShardPlan plan(10, 3, 2, 4);
  ASSERT_EQ(plan.buckets().size(), 4u);
  EXPECT_EQ(plan.max_bucket_size(), 3u);
  EXPECT_EQ(plan.buckets()[3].begin, 9u);
  EXPECT_EQ(plan.buckets()[3].valid, 1u);
  EXPECT_EQ(plan.buckets()[3].size, 3u);
  EXPECT_EQ(plan.padded_elements(), 12u);
  EXPECT_EQ(plan.local_elements(), 4u);
  const ShardRange tail = plan.local_range(3);  // rank 2's block of the last bucket: padding
  EXPECT_EQ(tail.begin, 11u);
  EXPECT_EQ(tail.count, 0u);
  EXPECT_EQ(tail.local, 3u);
}

TEST(ShardPlan, RefusesWhatCannotBeSharded) {
  EXPECT_THROW(ShardPlan(0, 1, 0, 16), Error);
  EXPECT_THROW(ShardPlan(16, 0, 0, 16), Error);
  EXPECT_THROW(ShardPlan(16, 2, 2, 16), Error);
  EXPECT_THROW(ShardPlan(16, 2, -1, 16), Error);
  EXPECT_THROW(ShardPlan(16, 2, 0, 0), Error);
}

}  // namespace
}  // namespace gpt2
