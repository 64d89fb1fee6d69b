#include "dist/shard_plan.h"

#include <algorithm>

#include "base/error.h"

namespace gpt2 {

ShardPlan::ShardPlan(size_t num_elements, int world_size, int rank, size_t bucket_elements)
    : num_elements_(num_elements), world_size_(world_size), rank_(rank) {
  if (num_elements == 0) GPT2_FAIL("shard plan: no elements to shard");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    GPT2_FAIL("shard plan: rank ", rank, " of world size ", world_size);
  if (bucket_elements == 0) GPT2_FAIL("shard plan: buckets of 0 elements");
  const size_t world = static_cast<size_t>(world_size);
  const size_t full = std::max(world, bucket_elements / world * world);
  for (size_t begin = 0; begin < num_elements; begin += full) {
    GradientBucket bucket;
    bucket.begin = begin;
    bucket.valid = std::min(full, num_elements - begin);
    bucket.size = (bucket.valid + world - 1) / world * world;
    bucket.shard = bucket.size / world;
    bucket.local_begin = local_elements_;
    padded_elements_ += bucket.size;
    local_elements_ += bucket.shard;
    buckets_.push_back(bucket);
  }
}

size_t ShardPlan::max_bucket_size() const {
  size_t largest = 0;
  for (const GradientBucket& bucket : buckets_) largest = std::max(largest, bucket.size);
  return largest;
}

ShardRange ShardPlan::local_range(size_t k) const {
  GPT2_CHECK(k < buckets_.size(), "bucket ", k, " of ", buckets_.size());
  const GradientBucket& bucket = buckets_[k];
  ShardRange range;
  range.begin = bucket.begin + static_cast<size_t>(rank_) * bucket.shard;
  range.local = bucket.local_begin;
  const size_t end = std::min(range.begin + bucket.shard, num_elements_);
  range.count = end > range.begin ? end - range.begin : 0;
  return range;
}

}  // namespace gpt2
