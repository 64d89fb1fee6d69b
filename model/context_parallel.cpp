/**
 * @file context_parallel.cpp
 * @brief The context-parallel layout and the CPU model's attention over its group.
 */
#include "model/context_parallel.h"

#include <algorithm>
#include <utility>

#include "base/error.h"
#include "kernels/cpu/attention.h"

namespace gpt2 {

void ContextShard::select(const int* full, int* local, int B) const {
  for (size_t b = 0; b < static_cast<size_t>(B); ++b)
    for (size_t i = 0; i < positions.size(); ++i)
      local[b * positions.size() + i] = full[b * seq_len + positions[i]];
}

ContextShard context_shard(int seq_len, int size, int rank) {
  if (size < 1) GPT2_USAGE_FAIL("a context-parallel group of ", size, " ranks");
  if (2 * static_cast<int64_t>(size) > seq_len)
    GPT2_USAGE_FAIL("--context-parallel ", size, " cuts each sequence into ", 2 * size,
                    " chunks: --seq-len must be at least ", 2 * size, " (got ", seq_len, ")");
  GPT2_CHECK(rank >= 0 && rank < size, "rank ", rank, " of a group of ", size);
  ContextShard shard;
  shard.rank = rank;
  shard.size = size;
  shard.seq_len = seq_len;
  // Boundaries on multiples of kContextChunkGranule when every chunk can hold that many.
  const int64_t granule =
      seq_len >= int64_t{2} * size * kContextChunkGranule ? kContextChunkGranule : 1;
  const auto chunk_begin = [&](int chunk) {
    if (chunk == 2 * size) return seq_len;
    const int64_t begin = static_cast<int64_t>(chunk) * seq_len / (2 * size);
    return static_cast<int>(begin / granule * granule);
  };
  for (int r = 0; r < size; ++r) {
    int length = 0;
    for (const int chunk : {r, 2 * size - 1 - r}) {
      for (int p = chunk_begin(chunk); p < chunk_begin(chunk + 1); ++p, ++length)
        if (r == rank) shard.positions.push_back(p);
    }
    shard.max_local = std::max(shard.max_local, length);
  }
  return shard;
}

size_t CpuContextAttention::buffer_elements(const ContextShard& shard, int B, int C) {
  const size_t row = static_cast<size_t>(B) * 2 * C;
  return row * shard.max_local * (1 + shard.size) + 2 * row * shard.seq_len;
}

CpuContextAttention::CpuContextAttention(Communicator& group, ContextShard shard, int B, int C,
                                         int NH)
    : group_(group), shard_(std::move(shard)), B_(B), C_(C), NH_(NH) {
  GPT2_CHECK(group.world_size() == shard_.size && group.rank() == shard_.rank,
             "context group rank ", group.rank(), " of ", group.world_size(), " for shard ",
             shard_.rank, " of ", shard_.size);
  GPT2_CHECK(group.memory_space() == MemorySpace::kHost, "the CPU model's context group needs "
             "a host communicator, not ", group.backend());
  for (int r = 0; r < shard_.size; ++r)
    positions_.push_back(context_shard(shard_.seq_len, shard_.size, r).positions);
  const size_t row = static_cast<size_t>(B) * 2 * C;
  block_.assign(row * shard_.max_local, 0.0f);
  exchanged_.assign(row * shard_.max_local * shard_.size, 0.0f);
  kv_.assign(row * shard_.seq_len, 0.0f);
  dkv_.assign(row * shard_.seq_len, 0.0f);
}

void CpuContextAttention::gather_keys_and_values(const float* qkv) {
  const size_t C2 = 2 * static_cast<size_t>(C_), C3 = 3 * static_cast<size_t>(C_);
  const size_t T = shard_.seq_len, max_local = shard_.max_local;
  const size_t local = shard_.positions.size();
  for (size_t b = 0; b < static_cast<size_t>(B_); ++b)
    for (size_t i = 0; i < local; ++i)
      std::copy(qkv + (b * local + i) * C3 + C_, qkv + (b * local + i + 1) * C3,
                block_.begin() + (b * max_local + i) * C2);
  group_.all_gather(block_.data(), exchanged_.data(), block_.size());
  for (size_t r = 0; r < positions_.size(); ++r) {
    const float* from = exchanged_.data() + r * block_.size();
    for (size_t b = 0; b < static_cast<size_t>(B_); ++b)
      for (size_t i = 0; i < positions_[r].size(); ++i)
        std::copy(from + (b * max_local + i) * C2, from + (b * max_local + i + 1) * C2,
                  kv_.begin() + (b * T + positions_[r][i]) * C2);
  }
}

void CpuContextAttention::forward(float* out, float* lse, const float* qkv) {
  gather_keys_and_values(qkv);
  cpu::attention_positions_forward(out, lse, qkv, 3 * C_, kv_.data(), shard_.positions.data(),
                                   B_, shard_.local_len(), shard_.seq_len, C_, NH_);
}

void CpuContextAttention::backward(float* dqkv, const float* dout, const float* qkv,
                                   const float* out, const float* lse) {
  gather_keys_and_values(qkv);  // recomputed rather than kept: one layer's, not L of them
  std::fill(dkv_.begin(), dkv_.end(), 0.0f);
  cpu::attention_positions_backward(dqkv, 3 * C_, dkv_.data(), dout, qkv, 3 * C_, kv_.data(), out,
                                    lse, shard_.positions.data(), B_, shard_.local_len(),
                                    shard_.seq_len, C_, NH_);
  // Each rank's rows into its block of the exchange, then the sum over the group of the own.
  const size_t C2 = 2 * static_cast<size_t>(C_), C3 = 3 * static_cast<size_t>(C_);
  const size_t T = shard_.seq_len, max_local = shard_.max_local;
  std::fill(exchanged_.begin(), exchanged_.end(), 0.0f);
  for (size_t r = 0; r < positions_.size(); ++r) {
    float* to = exchanged_.data() + r * block_.size();
    for (size_t b = 0; b < static_cast<size_t>(B_); ++b)
      for (size_t i = 0; i < positions_[r].size(); ++i)
        std::copy(dkv_.begin() + (b * T + positions_[r][i]) * C2,
                  dkv_.begin() + (b * T + positions_[r][i] + 1) * C2,
                  to + (b * max_local + i) * C2);
  }
  group_.reduce_scatter_sum(exchanged_.data(), block_.data(), block_.size());
  const size_t local = shard_.positions.size();
  for (size_t b = 0; b < static_cast<size_t>(B_); ++b)
    for (size_t i = 0; i < local; ++i)
      std::copy(block_.begin() + (b * max_local + i) * C2,
                block_.begin() + (b * max_local + i + 1) * C2,
                dqkv + (b * local + i) * C3 + C_);
}

}  // namespace gpt2
