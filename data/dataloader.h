/**
 * @file dataloader.h
 * @brief Batches of (inputs, targets) from token shards, shuffled deterministically.
 *
 * Shards come from a glob pattern (sorted). Each shard of N tokens holds
 * W = (N - 1) / T windows of T + 1 tokens (window w starts at token w*T, so neighbours share
 * one token); inputs are a window's first T tokens, targets its last T. Windows are dealt to
 * ranks round-robin (window w belongs to rank w % world_size) and each rank takes B of its
 * windows per batch: batch group g is the B * world_size windows from g*B*world_size on, and
 * row b of rank r's batch from group g is window g*B*world_size + b*world_size + r. A shard
 * gives floor(W / (B * world_size)) groups = batches per rank; the leftover windows at its
 * end are never used.
 * A shard that cannot fill one batch is an error naming the file.
 *
 * Shuffling (when enabled): at each epoch the shard order is permuted and, within each shard,
 * the order of batch groups; both permutations come from Rng seeded by (seed, epoch, shard),
 * so a position (epoch, shard cursor, batch cursor) fully determines all future batches and a
 * resumed loader continues bit for bit. Shuffling whole groups keeps every rank of one world
 * (same seed, same files) on the same permutation with a disjoint, equally long window slice.
 * Without shuffling, order is file order and window order (validation).
 * position() is always the next batch to produce: after a shard's last batch it already
 * points at the next shard (or batch 0 of shard 0 of the next epoch).
 * Tokens are validated against vocab_size as each shard is loaded (only the current shard is
 * in memory); headers of all shards are validated at construction.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpt2 {

struct LoaderPosition {
  int64_t epoch = 0;         // completed passes over all shards
  int64_t shard_cursor = 0;  // index into this epoch's shard order
  int64_t batch_cursor = 0;  // next batch within the current shard
};

struct DataLoaderOptions {
  std::string pattern;
  int batch_size = 1;    // B
  int seq_len = 1;       // T
  int vocab_size = 0;    // tokens must be < vocab_size (0 skips the check)
  int rank = 0;
  int world_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
};

class DataLoader {
 public:
  explicit DataLoader(const DataLoaderOptions& options);

  /// Fills inputs and targets, B*T ints each (row-major (B,T)); advances the position, moving
  /// to the next shard (and the next epoch after the last) as needed.
  void next_batch(int* inputs, int* targets);

  /// Back to the start of epoch 0.
  void reset();

  LoaderPosition position() const { return position_; }
  void set_position(const LoaderPosition& position);  // validates; throws gpt2::Error if invalid

  int64_t batches_per_epoch() const;  // for this rank, summed over shards
  int64_t total_tokens() const;       // over all shards
  const std::vector<std::string>& files() const { return files_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  void ensure_current_shard_loaded();
  std::vector<int64_t> shard_order(int64_t epoch) const;
  std::vector<int64_t> batch_order(int64_t epoch, int64_t shard) const;
  int64_t current_file() const;  // file index at position_ (ensure_current_shard_loaded first)

  DataLoaderOptions options_;
  std::vector<std::string> files_;
  std::vector<int64_t> shard_tokens_;   // token count per file
  std::vector<int64_t> shard_batches_;  // batches per rank per file
  LoaderPosition position_;
  int64_t loaded_shard_ = -1;             // file index whose tokens are in tokens_
  int64_t order_epoch_ = -1;              // epoch whose shard order is in current_order_
  std::vector<int64_t> current_order_;    // shard order (file indices) of order_epoch_
  int64_t batches_epoch_ = -1;            // (epoch, file) whose group order is current_batches_
  int64_t batches_shard_ = -1;
  std::vector<int64_t> current_batches_;  // batch group order within the current shard
  std::vector<uint16_t> tokens_;
};

}  // namespace gpt2
