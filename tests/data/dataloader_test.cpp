/**
 * @file dataloader_test.cpp
 * @brief Tests for data/dataloader.h: windows, order, shuffling, ranks, resume, errors.
 *
 * Most shards here are "labelled": token i of shard s is s * kStride + i, so every row of a
 * batch can be decoded back to (shard, window) and checked to be a contiguous run of the
 * stream with targets shifted by one. Expected window sets and orders are derived from the
 * documented layout (window w starts at token w*T, batch group g holds windows
 * [g*B*world, (g+1)*B*world), row b of rank r is window g*B*world + b*world + r), never
 * hard-coded. Shards are tiny, so every test runs in milliseconds.
 */
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/error.h"
#include "base/rng.h"
#include "data/dataloader.h"
#include "data/shard.h"
#include "test_fixtures.h"

namespace gpt2 {
namespace {

using testing::error_message;

using ::testing::HasSubstr;

constexpr int kStride = 10000;  // labelled shards hold fewer tokens than this

struct WindowId {
  int64_t shard = 0;
  int64_t window = 0;
  bool operator<(const WindowId& o) const {
    return shard != o.shard ? shard < o.shard : window < o.window;
  }
  bool operator==(const WindowId& o) const { return shard == o.shard && window == o.window; }
  bool operator!=(const WindowId& o) const { return !(*this == o); }
};

void PrintTo(const WindowId& id, std::ostream* os) {
  *os << "(shard " << id.shard << ", window " << id.window << ")";
}

struct Batch {
  std::vector<int> inputs;
  std::vector<int> targets;
  bool operator==(const Batch& o) const { return inputs == o.inputs && targets == o.targets; }
};

bool same_position(const LoaderPosition& a, const LoaderPosition& b) {
  return a.epoch == b.epoch && a.shard_cursor == b.shard_cursor &&
         a.batch_cursor == b.batch_cursor;
}

std::string describe(const LoaderPosition& p) {
  return "(epoch " + std::to_string(p.epoch) + ", shard " + std::to_string(p.shard_cursor) +
         ", batch " + std::to_string(p.batch_cursor) + ")";
}

Batch next(DataLoader& loader) {
  const size_t n = static_cast<size_t>(loader.options().batch_size) *
                   static_cast<size_t>(loader.options().seq_len);
  Batch batch{std::vector<int>(n, -1), std::vector<int>(n, -1)};
  loader.next_batch(batch.inputs.data(), batch.targets.data());
  return batch;
}

// Rows of a batch from labelled shards as (shard, window); checks each row is a contiguous
// run of one shard starting at a window boundary, with targets = inputs shifted by one.
std::vector<WindowId> decode(const Batch& batch, int T) {
  std::vector<WindowId> ids;
  const size_t rows = batch.inputs.size() / static_cast<size_t>(T);
  for (size_t b = 0; b < rows; ++b) {
    const size_t row = b * static_cast<size_t>(T);
    const int first = batch.inputs[row];
    for (int t = 0; t < T; ++t) {
      EXPECT_EQ(batch.inputs[row + t], first + t) << "row " << b << " column " << t;
      EXPECT_EQ(batch.targets[row + t], first + t + 1) << "row " << b << " column " << t;
    }
    EXPECT_EQ(first % kStride % T, 0) << "row " << b << " does not start at a window";
    ids.push_back({first / kStride, first % kStride / T});
  }
  return ids;
}

// Windows of the next `batches` batches, in order.
std::vector<WindowId> next_windows(DataLoader& loader, int64_t batches) {
  std::vector<WindowId> ids;
  for (int64_t i = 0; i < batches; ++i) {
    const std::vector<WindowId> rows = decode(next(loader), loader.options().seq_len);
    ids.insert(ids.end(), rows.begin(), rows.end());
  }
  return ids;
}

std::vector<WindowId> sorted(std::vector<WindowId> ids) {
  std::sort(ids.begin(), ids.end());
  return ids;
}

class DataLoaderTest : public testing::ScratchDirTest {
 protected:
  DataLoaderTest() : ScratchDirTest("gpt2_loader") {}

  std::string shard_path(int64_t index) const {
    return dir_ + "/shard_" + std::to_string(index) + ".bin";
  }
  std::string pattern() const { return dir_ + "/shard_*.bin"; }

  // Labelled shards, one per entry of `sizes` (at most 6 shards, each < kStride tokens).
  void write_labelled_shards(const std::vector<int64_t>& sizes) {
    ASSERT_LE(sizes.size(), 6u);
    sizes_ = sizes;
    for (size_t s = 0; s < sizes.size(); ++s) {
      ASSERT_LT(sizes[s], kStride);
      std::vector<uint16_t> tokens(static_cast<size_t>(sizes[s]));
      for (size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = static_cast<uint16_t>(s * kStride + i);
      }
      write_shard(shard_path(static_cast<int64_t>(s)), tokens);
    }
  }

  DataLoaderOptions options(int B, int T, bool shuffle = false, uint64_t seed = 0, int rank = 0,
                            int world = 1) const {
    DataLoaderOptions o;
    o.pattern = pattern();
    o.batch_size = B;
    o.seq_len = T;
    o.shuffle = shuffle;
    o.seed = seed;
    o.rank = rank;
    o.world_size = world;
    return o;
  }

  // Windows of shard s that the layout uses (complete batch groups only), in window order.
  std::vector<WindowId> usable_windows(int64_t s, int B, int T, int world) const {
    const int64_t windows = (sizes_[static_cast<size_t>(s)] - 1) / T;
    const int64_t groups = windows / (int64_t{B} * world);
    std::vector<WindowId> ids;
    for (int64_t w = 0; w < groups * B * world; ++w) ids.push_back({s, w});
    return ids;
  }

  std::vector<WindowId> all_usable_windows(int B, int T, int world) const {
    std::vector<WindowId> ids;
    for (size_t s = 0; s < sizes_.size(); ++s) {
      const std::vector<WindowId> more = usable_windows(static_cast<int64_t>(s), B, T, world);
      ids.insert(ids.end(), more.begin(), more.end());
    }
    return ids;
  }

  std::vector<int64_t> sizes_;
};

TEST_F(DataLoaderTest, InputsAndTargetsAreTheTokenStreamShiftedByOne) {
  // Random tokens, so a loader that confuses offsets cannot pass by accident.
  Rng rng(1234);
  std::vector<uint16_t> stream(5 * 3 * 7 + 4);
  for (uint16_t& token : stream) token = static_cast<uint16_t>(rng.uniform_int(50257));
  write_shard(shard_path(0), stream);
  const int B = 3, T = 7;
  DataLoader loader(options(B, T));
  for (int64_t batch_index = 0; batch_index < 5; ++batch_index) {
    const Batch batch = next(loader);
    for (int b = 0; b < B; ++b) {
      const int64_t start = (batch_index * B + b) * T;  // window batch_index*B + b
      for (int t = 0; t < T; ++t) {
        ASSERT_EQ(batch.inputs[b * T + t], stream[start + t]) << "batch " << batch_index;
        ASSERT_EQ(batch.targets[b * T + t], stream[start + t + 1]) << "batch " << batch_index;
      }
    }
  }
}

TEST_F(DataLoaderTest, PlainOrderWalksWindowsThenShardsThenEpochs) {
  const int B = 2, T = 4;
  // 27/4 = 6 windows -> 3 batches (+3 spare tokens); 16/4 = 4 windows -> 2 batches.
  write_labelled_shards({28, 17});
  DataLoader loader(options(B, T));
  ASSERT_EQ(loader.batches_per_epoch(), 5);

  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int64_t shard = 0; shard < 2; ++shard) {
      const std::vector<WindowId> expected = usable_windows(shard, B, T, 1);
      for (size_t i = 0; i < expected.size(); i += B) {
        const LoaderPosition at = loader.position();
        EXPECT_TRUE(same_position(at, {epoch, shard, static_cast<int64_t>(i / B)}))
            << describe(at);
        const std::vector<WindowId> got = next_windows(loader, 1);
        EXPECT_EQ(got, std::vector<WindowId>(expected.begin() + i, expected.begin() + i + B));
      }
    }
  }
  EXPECT_TRUE(same_position(loader.position(), {2, 0, 0})) << describe(loader.position());
}

TEST_F(DataLoaderTest, ShuffleVisitsEveryWindowOnceAndReordersEachEpoch) {
  const int B = 2, T = 3;
  write_labelled_shards({40, 61, 25, 52});
  DataLoader loader(options(B, T, /*shuffle=*/true, /*seed=*/7));
  const std::vector<WindowId> plain = all_usable_windows(B, T, 1);
  ASSERT_EQ(loader.batches_per_epoch() * B, static_cast<int64_t>(plain.size()));

  std::vector<std::vector<WindowId>> epochs;
  for (int epoch = 0; epoch < 6; ++epoch) {
    epochs.push_back(next_windows(loader, loader.batches_per_epoch()));
    const std::vector<WindowId>& seen = epochs.back();
    EXPECT_EQ(sorted(seen), plain) << "epoch " << epoch << " must visit each window once";
    EXPECT_NE(seen, plain) << "epoch " << epoch << " is in plain order";
    // Shards are consumed one at a time: the shard changes exactly (shards - 1) times.
    int changes = 0;
    for (size_t i = 1; i < seen.size(); ++i) changes += seen[i].shard != seen[i - 1].shard;
    EXPECT_EQ(changes, 3) << "epoch " << epoch;
    // Whole batch groups are shuffled: a batch is B consecutive windows of one group.
    for (size_t i = 0; i < seen.size(); i += B) {
      EXPECT_EQ(seen[i].window % B, 0);
      EXPECT_EQ(seen[i + 1], (WindowId{seen[i].shard, seen[i].window + 1}));
    }
  }
  // Both permutations are redrawn every epoch: the shard order (4! orders, so six epochs
  // cannot all agree unless it is fixed) and the group order within one shard.
  const auto shard_sequence = [](const std::vector<WindowId>& seen) {
    std::vector<int64_t> shards;
    for (const WindowId& id : seen) {
      if (shards.empty() || shards.back() != id.shard) shards.push_back(id.shard);
    }
    return shards;
  };
  const auto windows_of_shard = [](const std::vector<WindowId>& seen, int64_t shard) {
    std::vector<int64_t> windows;
    for (const WindowId& id : seen) {
      if (id.shard == shard) windows.push_back(id.window);
    }
    return windows;
  };
  std::set<std::vector<int64_t>> shard_orders;
  for (const auto& seen : epochs) shard_orders.insert(shard_sequence(seen));
  EXPECT_GT(shard_orders.size(), 1u) << "the shard order never changes between epochs";
  for (size_t epoch = 1; epoch < epochs.size(); ++epoch) {
    EXPECT_NE(windows_of_shard(epochs[epoch], 1), windows_of_shard(epochs[epoch - 1], 1))
        << "shard 1 (10 groups) kept its group order from epoch " << epoch - 1;
  }
}

TEST_F(DataLoaderTest, SameSeedGivesTheSameOrderAndAnotherSeedAnother) {
  const int B = 1, T = 5;
  write_labelled_shards({81, 56, 101});
  DataLoader first(options(B, T, true, 42));
  DataLoader second(options(B, T, true, 42));
  DataLoader other(options(B, T, true, 43));
  const int64_t batches = 2 * first.batches_per_epoch();
  const std::vector<WindowId> order = next_windows(first, batches);
  EXPECT_EQ(next_windows(second, batches), order);
  EXPECT_NE(next_windows(other, batches), order);
}

TEST_F(DataLoaderTest, RankSlicesAreDisjointEqualAndCoverTheEpoch) {
  const int B = 2, T = 3, world = 3;
  write_labelled_shards({3 * 2 * 3 * 2 + 1, 3 * 2 * 3 * 3 + 5, 3 * 2 * 3 + 1});
  for (bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffled" : "plain");
    std::vector<std::vector<WindowId>> per_rank;
    for (int rank = 0; rank < world; ++rank) {
      DataLoader loader(options(B, T, shuffle, 99, rank, world));
      EXPECT_EQ(loader.batches_per_epoch(), 6) << "rank " << rank;
      per_rank.push_back(next_windows(loader, loader.batches_per_epoch()));
      for (const WindowId& id : per_rank.back()) {
        EXPECT_EQ(id.window % world, rank) << "window " << id.window << " dealt to rank " << rank;
      }
    }
    // At each step all ranks read the same batch group (one shared permutation).
    for (size_t i = 0; i < per_rank[0].size(); ++i) {
      for (int rank = 1; rank < world; ++rank) {
        EXPECT_EQ(per_rank[rank][i].shard, per_rank[0][i].shard) << "step " << i;
        EXPECT_EQ(per_rank[rank][i].window / (B * world), per_rank[0][i].window / (B * world))
            << "step " << i;
      }
    }
    std::vector<WindowId> together;
    for (const auto& slice : per_rank) together.insert(together.end(), slice.begin(), slice.end());
    const std::vector<WindowId> all = sorted(together);
    EXPECT_TRUE(std::adjacent_find(all.begin(), all.end()) == all.end()) << "ranks overlap";
    EXPECT_EQ(all, all_usable_windows(B, T, world));
  }
}

TEST_F(DataLoaderTest, ResumingFromASavedPositionReproducesTheFutureBatches) {
  const int B = 2, T = 3, world = 2, rank = 1;
  write_labelled_shards({3 * 4 * 3 + 2, 2 * 4 * 3 + 1, 4 * 4 * 3 + 3});
  const DataLoaderOptions opts = options(B, T, true, 2024, rank, world);

  DataLoader reference(opts);
  const int64_t per_epoch = reference.batches_per_epoch();
  const int64_t total = 4 * per_epoch;
  std::vector<LoaderPosition> positions;
  std::vector<Batch> batches;
  for (int64_t i = 0; i < total; ++i) {
    positions.push_back(reference.position());
    batches.push_back(next(reference));
  }

  // Save points: mid-shard, every shard boundary and every epoch boundary in the first epochs.
  std::vector<size_t> save_points;
  bool have_mid_shard = false;
  for (size_t i = 1; i < static_cast<size_t>(total - per_epoch); ++i) {
    const LoaderPosition& p = positions[i];
    if (p.batch_cursor == 0) save_points.push_back(i);  // shard or epoch boundary
    if (p.batch_cursor > 0 && !have_mid_shard) {
      save_points.push_back(i);
      have_mid_shard = true;
    }
  }
  ASSERT_TRUE(have_mid_shard);
  ASSERT_TRUE(std::any_of(save_points.begin(), save_points.end(), [&](size_t i) {
    return positions[i].epoch > 0 && positions[i].shard_cursor == 0;
  })) << "no epoch boundary among the save points";

  DataLoader reused(opts);  // one loader moved around: has to reload whatever it holds
  for (size_t start : save_points) {
    SCOPED_TRACE("resume at " + describe(positions[start]));
    DataLoader fresh(opts);
    fresh.set_position(positions[start]);
    reused.set_position(positions[start]);
    EXPECT_TRUE(same_position(fresh.position(), positions[start]));
    for (size_t i = start; i < start + static_cast<size_t>(per_epoch); ++i) {
      ASSERT_TRUE(next(fresh) == batches[i]) << "batch " << i;
      ASSERT_TRUE(next(reused) == batches[i]) << "batch " << i;
      if (i + 1 < positions.size()) {
        ASSERT_TRUE(same_position(fresh.position(), positions[i + 1]));
      }
    }
  }
}

TEST_F(DataLoaderTest, ResetGoesBackToTheStartOfEpochZero) {
  write_labelled_shards({50, 30});
  DataLoader loader(options(2, 4, true, 5));
  const std::vector<WindowId> first = next_windows(loader, loader.batches_per_epoch() + 2);
  loader.reset();
  EXPECT_TRUE(same_position(loader.position(), {0, 0, 0}));
  EXPECT_EQ(next_windows(loader, loader.batches_per_epoch() + 2), first);
}

TEST_F(DataLoaderTest, SetPositionRejectsPositionsOutsideTheData) {
  const int B = 1, T = 4;
  write_labelled_shards({4 * 3 + 1, 4 * 5 + 1});  // 3 and 5 batches
  DataLoader loader(options(B, T));
  next(loader);
  const LoaderPosition before = loader.position();
  for (const LoaderPosition& bad : std::vector<LoaderPosition>{
           {-1, 0, 0}, {0, -1, 0}, {0, 2, 0}, {0, 0, -1}, {0, 0, 3}, {3, 1, 5}}) {
    const std::string message = error_message([&] { loader.set_position(bad); });
    EXPECT_THAT(message, HasSubstr("invalid position")) << describe(bad);
    EXPECT_TRUE(same_position(loader.position(), before)) << "a rejected position moved it";
  }
  loader.set_position({7, 1, 4});  // the last batch of shard 1 in some later epoch
  EXPECT_EQ(next_windows(loader, 1), (std::vector<WindowId>{{1, 4}}));
  EXPECT_TRUE(same_position(loader.position(), {8, 0, 0}));
}

TEST_F(DataLoaderTest, SetPositionBoundsTheBatchCursorByTheShuffledShard) {
  const int B = 1, T = 2;
  write_labelled_shards({2 * 2 + 1, 2 * 7 + 1, 2 * 4 + 1});  // 2, 7 and 4 batches
  const DataLoaderOptions opts = options(B, T, true, 11);
  DataLoader walker(opts);
  const int64_t epoch = 1;
  walker.set_position({epoch, 0, 0});
  // Which file sits at each cursor of this epoch's shuffled order, seen from the batches.
  std::vector<int64_t> file_at_cursor;
  while (walker.position().epoch == epoch) {
    const int64_t cursor = walker.position().shard_cursor;
    const int64_t shard = next_windows(walker, 1)[0].shard;
    if (static_cast<int64_t>(file_at_cursor.size()) == cursor) file_at_cursor.push_back(shard);
  }
  ASSERT_EQ(file_at_cursor.size(), 3u);
  DataLoader loader(opts);
  for (int64_t cursor = 0; cursor < 3; ++cursor) {
    const int64_t batches = (sizes_[file_at_cursor[cursor]] - 1) / T;
    loader.set_position({epoch, cursor, batches - 1});  // accepted
    EXPECT_THAT(error_message([&] { loader.set_position({epoch, cursor, batches}); }),
                HasSubstr("batch cursor must be in [0, " + std::to_string(batches) + ")"));
  }
}

TEST_F(DataLoaderTest, ReportsFilesTokenAndBatchCounts) {
  const int B = 2, T = 4;
  write_labelled_shards({28, 17, 9});  // 3, 2 and 1 batches
  DataLoader loader(options(B, T));
  EXPECT_EQ(loader.files(),
            (std::vector<std::string>{shard_path(0), shard_path(1), shard_path(2)}));
  EXPECT_EQ(loader.total_tokens(), 28 + 17 + 9);
  EXPECT_EQ(loader.batches_per_epoch(), 3 + 2 + 1);
}

TEST_F(DataLoaderTest, ShardShorterThanOneBatchNamesTheFileAndTheNeed) {
  const int B = 2, T = 4;
  write_labelled_shards({40, 16});  // 16 tokens = 3 windows < B = 2 per rank * 2 ranks
  EXPECT_NO_THROW({ DataLoader loader(options(B, T, false, 0, 0, 1)); }) << "enough for one rank";
  const std::string message =
      error_message([&] { DataLoader loader(options(B, T, false, 0, 1, 2)); });
  const int64_t needed = int64_t{B} * 2 * T + 1;
  EXPECT_THAT(message, HasSubstr(shard_path(1)));
  EXPECT_THAT(message, HasSubstr("16 tokens"));
  EXPECT_THAT(message, HasSubstr(std::to_string(needed) + " tokens"));
}

TEST_F(DataLoaderTest, NoMatchingFileNamesThePattern) {
  const std::string message = error_message([&] { DataLoader loader(options(1, 4)); });
  EXPECT_EQ(message, "no file matches '" + pattern() + "'");
}

TEST_F(DataLoaderTest, EveryHeaderIsValidatedAtConstruction) {
  write_labelled_shards({30, 30, 30});
  // Corrupt the last shard's magic: the loader must refuse before any batch is read.
  {
    FILE* file = std::fopen(shard_path(2).c_str(), "r+b");
    ASSERT_NE(file, nullptr);
    std::fputc('X', file);
    std::fclose(file);
  }
  const std::string message = error_message([&] { DataLoader loader(options(1, 4)); });
  EXPECT_THAT(message, HasSubstr(shard_path(2)));
  EXPECT_THAT(message, HasSubstr("bad magic"));
}

TEST_F(DataLoaderTest, TokensAreCheckedAgainstTheVocabWhenTheirShardIsLoaded) {
  const int B = 1, T = 4;
  write_shard(shard_path(0), std::vector<uint16_t>(4 * 2 + 1, 100));  // 2 batches, all valid
  std::vector<uint16_t> bad(4 * 2 + 1, 100);
  bad[6] = 1000;
  write_shard(shard_path(1), bad);
  DataLoaderOptions opts = options(B, T);
  opts.vocab_size = 1000;
  DataLoader loader(opts);  // headers are fine; tokens are not read yet
  next(loader);
  next(loader);
  const std::string message = error_message([&] { next(loader); });
  EXPECT_THAT(message, HasSubstr(shard_path(1)));
  EXPECT_THAT(message, HasSubstr("token 1000 at index 6"));
  EXPECT_THAT(message, HasSubstr("vocab size 1000"));
}

}  // namespace
}  // namespace gpt2
