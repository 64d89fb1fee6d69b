/**
 * @file shard_plan.h
 * @brief The fixed buckets in which a flat gradient is reduced, and each rank's shard of them
 *        (ZeRO-1: the part of the optimizer state a rank keeps and updates).
 *
 * The N elements of a flat buffer (parameters and gradients in ParameterLayout order) are cut
 * from element 0 on into buckets of bucket_elements rounded down to a multiple of world_size
 * (at least world_size); the last bucket holds the rest rounded up to a multiple of world_size,
 * so it may run up to world_size - 1 elements past N (its padding: zero in gradients, never
 * updated, dropped when gathered). Each bucket is one collective. Rank r owns block r of each
 * bucket, [begin + r*shard, begin + (r+1)*shard) with shard = size / world_size; a rank's local
 * optimizer state is its blocks of every bucket concatenated in bucket order.
 * Cuts: element indices a bucket may not run across, so that a range that becomes ready at
 * once (a layer's gradients, in the CUDA model's layer-major order) is whole buckets. Between
 * cuts the cutting is the same; the last bucket before a cut is rounded up to a multiple of
 * world_size like the last of all, so it may take up to world_size - 1 elements past the cut
 * (the next range starts after them).
 * The plan depends only on (N, world_size, bucket_elements, cuts): every rank, and every run at
 * the same world size, reduces the same ranges in the same order, which is what makes a
 * repeated run give the same bits. World size 1: one block per bucket, the whole buffer.
 */
#pragma once

#include <cstddef>
#include <vector>

namespace gpt2 {

/// Default bucket: 2^20 fp32 elements (4 MiB), about 120 collectives per step for GPT-2 124M.
constexpr size_t kDefaultBucketElements = size_t{1} << 20;

struct GradientBucket {
  size_t begin = 0;        // first element in the flat buffer
  size_t size = 0;         // elements in the collective: a multiple of world_size
  size_t valid = 0;        // elements below N (size - valid is the padding, last bucket only)
  size_t shard = 0;        // size / world_size: each rank's block
  size_t local_begin = 0;  // where the block starts in a rank's local state
};

/// This rank's block of one bucket, clipped to N.
struct ShardRange {
  size_t begin = 0;  // in the flat buffer
  size_t count = 0;  // elements below N (may be 0 in the padded tail)
  size_t local = 0;  // in the rank's local state
};

class ShardPlan {
 public:
  ShardPlan() = default;
  /// Throws gpt2::Error for num_elements == 0, world_size < 1, rank outside [0, world_size) or
  /// bucket_elements == 0. Cuts outside (0, num_elements) are ignored.
  ShardPlan(size_t num_elements, int world_size, int rank, size_t bucket_elements,
            std::vector<size_t> cuts = {});

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  size_t num_elements() const { return num_elements_; }
  size_t padded_elements() const { return padded_elements_; }  // sum of bucket sizes
  size_t local_elements() const { return local_elements_; }    // sum of shards
  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  /// The largest bucket's size (bucket_elements rounded down to a multiple of world_size).
  size_t max_bucket_size() const;
  /// This rank's block of bucket k.
  ShardRange local_range(size_t k) const;

 private:
  std::vector<GradientBucket> buckets_;
  size_t num_elements_ = 0, padded_elements_ = 0, local_elements_ = 0;
  int world_size_ = 1, rank_ = 0;
};

}  // namespace gpt2
