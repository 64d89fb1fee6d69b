/**
 * @file context_parallel.h
 * @brief Context parallelism: the ranks of a group share every sequence, each holding some of
 *        its positions; attention meets the keys and values of the whole group.
 *
 * Layout. A sequence of T positions is cut into 2N chunks, chunk j = [j T / (2N),
 * (j+1) T / (2N)) (near-equal; T >= 2N), each boundary rounded down to a multiple of
 * kContextChunkGranule (128) when T >= 2N * 128, so that a rank's rows start on the GPU
 * attention kernels' tiles; and rank r of the group's N holds chunks r and
 * 2N-1-r, in that order: every rank gets as many early (cheap) as late (dear) causal rows, the
 * balance Megatron-LM's context parallelism uses. Everything but attention is per position, so
 * a rank runs the model on its rows alone (the position embedding at their positions).
 * Attention (CpuContextAttention here; the CUDA model's own): each rank's keys and values are
 * all-gathered in the group (rows padded to the longest rank's), scattered into the whole
 * sequence's (B,T,2C), and the rank's queries attend to them by position
 * (kernels/cpu/attention.h, attention_positions_*). The backward gathers them again, computes
 * the sequence's key and value gradients from this rank's queries, and reduce-scatters them, so
 * that every rank receives the sum over the group for its own rows.
 * Loss. A rank's loss is the sum of its rows' losses over B * T, the whole sequence's count, so
 * the group's sum is the sequence's mean; parameter gradients are summed over every rank of the
 * job as with data parallelism (model.h), of which a context group is one replica.
 */
#pragma once

#include <vector>

#include "parallel/communicator.h"

namespace gpt2 {

/// Chunk boundaries fall on multiples of this many positions when the chunks are that long.
constexpr int kContextChunkGranule = 128;

/// Rank `rank` of a group of `size` sharing sequences of `seq_len` positions.
struct ContextShard {
  int rank = 0;
  int size = 1;
  int seq_len = 0;
  std::vector<int> positions;  // of this rank's rows, increasing
  int max_local = 0;           // rows of the group's largest rank

  int local_len() const { return static_cast<int>(positions.size()); }
  /// local (B, local_len) = the columns `positions` of full (B, seq_len).
  void select(const int* full, int* local, int B) const;
};

/// Throws gpt2::UsageError unless 1 <= size and 2 * size <= seq_len, and 0 <= rank < size.
ContextShard context_shard(int seq_len, int size, int rank);

/// A context-parallel CPU model's attention over its group (see the file comment): B sequences
/// of rows (B, shard.local_len()), C channels, NH heads, fp32.
class CpuContextAttention {
 public:
  /// group: the ranks sharing the sequences, rank shard.rank of shard.size; must outlive this.
  CpuContextAttention(Communicator& group, ContextShard shard, int B, int C, int NH);

  const ContextShard& shard() const { return shard_; }
  /// out (B,T_loc,C), lse (B,NH,T_loc) (=) from this rank's qkv (B,T_loc,3C). Collective.
  void forward(float* out, float* lse, const float* qkv);
  /// dqkv (B,T_loc,3C) (=): its query part from this rank's rows, its key and value parts summed
  /// over every rank's queries. Collective.
  void backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                const float* lse);

  /// The elements of this object's exchange buffers, for the memory plan.
  static size_t buffer_elements(const ContextShard& shard, int B, int C);

 private:
  /// kv_ (B,T,2C) = every rank's keys and values at their positions.
  void gather_keys_and_values(const float* qkv);

  Communicator& group_;
  ContextShard shard_;
  int B_, C_, NH_;
  std::vector<std::vector<int>> positions_;  // of every rank of the group
  std::vector<float> block_;      // (B,max_local,2C): this rank's rows, sent or received
  std::vector<float> exchanged_;  // (N,B,max_local,2C): every rank's block
  std::vector<float> kv_;         // (B,T,2C): the whole sequences' keys and values
  std::vector<float> dkv_;        // (B,T,2C): their gradients from this rank's queries
};

}  // namespace gpt2
