/**
 * @file dataloader.cpp
 * @brief DataLoader (see dataloader.h for the window / batch-group / shuffling contract).
 *
 * Everything a batch depends on is a pure function of (options, file list, position): the
 * shard order of an epoch and the group order of a shard are recomputed from Rng seeds
 * derived from (seed, epoch, file index), never carried as generator state. That is what
 * makes set_position() + next_batch() reproduce a run bit for bit. The caches below
 * (current_order_, current_batches_, tokens_) only avoid recomputing/reloading and are keyed
 * by what they were computed from.
 * Sizes and token offsets are int64: N can reach 2^31 and B * world * T can exceed int.
 */
#include "data/dataloader.h"

#include <numeric>

#include "base/error.h"
#include "base/file_io.h"
#include "base/rng.h"
#include "data/shard.h"

namespace gpt2 {
namespace {

// Stream id of the shard-order permutation; batch-order streams use the file index (>= 0).
constexpr uint64_t kShardOrderStream = ~uint64_t{0};

// Independent, well-mixed seed per (seed, epoch, stream) so nearby epochs and shards do not
// get correlated permutations.
uint64_t derive_seed(uint64_t seed, uint64_t epoch, uint64_t stream) {
  uint64_t x = seed;
  uint64_t mixed = splitmix64(x);
  x = mixed ^ epoch;
  mixed = splitmix64(x);
  x = mixed ^ stream;
  return splitmix64(x);
}

std::vector<int64_t> identity_order(int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

}  // namespace

DataLoader::DataLoader(const DataLoaderOptions& options) : options_(options) {
  if (options.batch_size < 1) {
    GPT2_USAGE_FAIL("data loader: batch size must be >= 1, got ", options.batch_size);
  }
  if (options.seq_len < 1) {
    GPT2_USAGE_FAIL("data loader: sequence length must be >= 1, got ", options.seq_len);
  }
  if (options.vocab_size < 0) {
    GPT2_USAGE_FAIL("data loader: vocab size must be >= 0, got ", options.vocab_size);
  }
  GPT2_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
             "rank ", options.rank, " of world size ", options.world_size);

  files_ = expand_glob(options.pattern);
  const int64_t windows_per_group = int64_t{options.batch_size} * options.world_size;
  const int64_t tokens_per_group = windows_per_group * options.seq_len + 1;
  for (const std::string& file : files_) {
    const int64_t tokens = read_shard_header(file).num_tokens;
    const int64_t windows = tokens > 0 ? (tokens - 1) / options.seq_len : 0;
    const int64_t batches = windows / windows_per_group;
    if (batches < 1) {
      GPT2_FAIL(file, ": ", tokens, " tokens cannot fill one batch: batch size ",
                options.batch_size, " x sequence length ", options.seq_len, " x world size ",
                options.world_size, " needs at least ", tokens_per_group, " tokens");
    }
    shard_tokens_.push_back(tokens);
    shard_batches_.push_back(batches);
  }
}

std::vector<int64_t> DataLoader::shard_order(int64_t epoch) const {
  std::vector<int64_t> order = identity_order(static_cast<int64_t>(files_.size()));
  if (options_.shuffle) {
    Rng rng(derive_seed(options_.seed, static_cast<uint64_t>(epoch), kShardOrderStream));
    shuffle(order, rng);
  }
  return order;
}

std::vector<int64_t> DataLoader::batch_order(int64_t epoch, int64_t shard) const {
  std::vector<int64_t> order = identity_order(shard_batches_[static_cast<size_t>(shard)]);
  if (options_.shuffle) {
    Rng rng(derive_seed(options_.seed, static_cast<uint64_t>(epoch),
                        static_cast<uint64_t>(shard)));
    shuffle(order, rng);
  }
  return order;
}

int64_t DataLoader::current_file() const {
  return current_order_[static_cast<size_t>(position_.shard_cursor)];
}

void DataLoader::ensure_current_shard_loaded() {
  if (order_epoch_ != position_.epoch) {
    current_order_ = shard_order(position_.epoch);
    order_epoch_ = position_.epoch;
  }
  const int64_t file = current_file();
  if (batches_epoch_ != position_.epoch || batches_shard_ != file) {
    current_batches_ = batch_order(position_.epoch, file);
    batches_epoch_ = position_.epoch;
    batches_shard_ = file;
  }
  if (loaded_shard_ != file) {
    const std::string& path = files_[static_cast<size_t>(file)];
    loaded_shard_ = -1;  // stays invalid if read_shard throws
    tokens_ = read_shard(path, options_.vocab_size);
    const int64_t expected = shard_tokens_[static_cast<size_t>(file)];
    if (static_cast<int64_t>(tokens_.size()) != expected) {
      GPT2_FAIL(path, ": now holds ", tokens_.size(), " tokens but held ", expected,
                " when the loader started: was it rewritten during training?");
    }
    loaded_shard_ = file;
  }
}

void DataLoader::next_batch(int* inputs, int* targets) {
  GPT2_CHECK(inputs != nullptr && targets != nullptr, "next_batch needs two B*T buffers");
  ensure_current_shard_loaded();
  const int64_t B = options_.batch_size;
  const int64_t T = options_.seq_len;
  const int64_t world = options_.world_size;
  const int64_t group = current_batches_[static_cast<size_t>(position_.batch_cursor)];
  for (int64_t b = 0; b < B; ++b) {
    const int64_t window = group * B * world + b * world + options_.rank;
    const uint16_t* tokens = tokens_.data() + window * T;
    int* input_row = inputs + b * T;
    int* target_row = targets + b * T;
    for (int64_t t = 0; t < T; ++t) {
      input_row[t] = tokens[t];
      target_row[t] = tokens[t + 1];
    }
  }

  // Advance, keeping position_ normalized (batch_cursor always inside the current shard).
  ++position_.batch_cursor;
  if (position_.batch_cursor == shard_batches_[static_cast<size_t>(current_file())]) {
    position_.batch_cursor = 0;
    ++position_.shard_cursor;
    if (position_.shard_cursor == static_cast<int64_t>(files_.size())) {
      position_.shard_cursor = 0;
      ++position_.epoch;
    }
  }
}

void DataLoader::reset() { position_ = LoaderPosition{}; }

void DataLoader::set_position(const LoaderPosition& position) {
  const auto describe = [&]() {
    return str_cat("data loader: invalid position (epoch ", position.epoch, ", shard cursor ",
                   position.shard_cursor, ", batch cursor ", position.batch_cursor, "): ");
  };
  if (position.epoch < 0) GPT2_FAIL(describe(), "epoch must be >= 0");
  const int64_t num_files = static_cast<int64_t>(files_.size());
  if (position.shard_cursor < 0 || position.shard_cursor >= num_files) {
    GPT2_FAIL(describe(), "shard cursor must be in [0, ", num_files, ") for the ", num_files,
              " file(s) matching '", options_.pattern, "'");
  }
  // The shard at this cursor depends on the epoch's (possibly shuffled) order.
  const int64_t file = shard_order(position.epoch)[static_cast<size_t>(position.shard_cursor)];
  const int64_t batches = shard_batches_[static_cast<size_t>(file)];
  if (position.batch_cursor < 0 || position.batch_cursor >= batches) {
    GPT2_FAIL(describe(), "batch cursor must be in [0, ", batches, ") for ",
              files_[static_cast<size_t>(file)], " (a position saved with other files, batch "
              "size, sequence length or world size?)");
  }
  position_ = position;
  ensure_current_shard_loaded();
}

int64_t DataLoader::batches_per_epoch() const {
  return std::accumulate(shard_batches_.begin(), shard_batches_.end(), int64_t{0});
}

int64_t DataLoader::total_tokens() const {
  return std::accumulate(shard_tokens_.begin(), shard_tokens_.end(), int64_t{0});
}

}  // namespace gpt2
