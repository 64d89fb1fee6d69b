#include "parallel/shard_plan.h"

#include <algorithm>

#include "base/error.h"

namespace gpt2 {

ShardPlan::ShardPlan(size_t num_elements, int world_size, int rank, size_t bucket_elements,
                     std::vector<size_t> cuts)
    : num_elements_(num_elements), world_size_(world_size), rank_(rank) {
  if (num_elements == 0) GPT2_FAIL("shard plan: no elements to shard");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    GPT2_FAIL("shard plan: rank ", rank, " of world size ", world_size);
  if (bucket_elements == 0) GPT2_FAIL("shard plan: buckets of 0 elements");
  const size_t world = static_cast<size_t>(world_size);
  const size_t full = std::max(world, bucket_elements / world * world);
  cuts.erase(std::remove_if(cuts.begin(), cuts.end(),
                            [&](size_t cut) { return cut == 0 || cut >= num_elements; }),
             cuts.end());
  cuts.push_back(num_elements);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  size_t begin = 0;
  for (const size_t end : cuts) {
    while (begin < end) {
      GradientBucket bucket;
      bucket.begin = begin;
      const size_t wanted = std::min(full, end - begin);
      bucket.size = (wanted + world - 1) / world * world;
      bucket.valid = std::min(bucket.size, num_elements - begin);
      bucket.shard = bucket.size / world;
      bucket.local_begin = local_elements_;
      padded_elements_ += bucket.size;
      local_elements_ += bucket.shard;
      buckets_.push_back(bucket);
      begin += bucket.size;
    }
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
