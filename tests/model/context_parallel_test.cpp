// Context parallelism on the CPU (model/context_parallel.h), ranks as threads
// (thread_communicator.h, its split giving the groups): the layout (2N chunks, rank r holding r
// and 2N-1-r, every position once, T not divisible by 2N); a context group of 2 or 3 ranks
// trains like one rank on the whole sequences (losses, the summed gradient, norms, parameters
// and AdamW moments within 1e-6) with gradient accumulation; context 2 x data 2 on 4 ranks
// likewise against one rank of twice the batch; naive attention is refused; the memory plan
// holds this rank's rows and the exchange.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "model/context_parallel.h"
#include "model/cpu_model.h"
#include "model/model.h"
#include "model/parameters.h"
#include "thread_communicator.h"
#include "test_fixtures.h"

namespace gpt2 {
namespace {

using testing::random_tokens;

using testing::run_ranks;

TEST(ContextShard, TwoChunksPerRankCoverEveryPositionOnce) {
  for (const int T : {4, 13, 16, 29, 64}) {
    for (const int N : {1, 2, 3}) {
      if (2 * N > T) continue;
      std::multiset<int> seen;
      int longest = 0;
      for (int r = 0; r < N; ++r) {
        const ContextShard shard = context_shard(T, N, r);
        EXPECT_TRUE(std::is_sorted(shard.positions.begin(), shard.positions.end()));
        seen.insert(shard.positions.begin(), shard.positions.end());
        longest = std::max(longest, shard.local_len());
        // Chunks r and 2N-1-r: the first row is chunk r's first position.
        EXPECT_EQ(shard.positions.front(), r * T / (2 * N)) << "T " << T << " N " << N;
        EXPECT_LE(shard.local_len(), 2 * ((T + 2 * N - 1) / (2 * N)));
        EXPECT_GE(shard.local_len(), 2 * (T / (2 * N)));
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(T));
      for (int p = 0; p < T; ++p) EXPECT_EQ(seen.count(p), 1u) << "position " << p;
      EXPECT_EQ(context_shard(T, N, 0).max_local, longest);
    }
  }
  const ContextShard shard = context_shard(13, 2, 1);  // chunks [3,6) and [6,9)
  EXPECT_EQ(shard.positions, (std::vector<int>{3, 4, 5, 6, 7, 8}));
  const std::vector<int> full = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112};
  std::vector<int> local(12);
  shard.select(full.data(), local.data(), 2);
  EXPECT_EQ(local, (std::vector<int>{3, 4, 5, 6, 7, 8, 103, 104, 105, 106, 107, 108}));
  EXPECT_THROW(context_shard(5, 3, 0), UsageError);  // 6 chunks of 5 positions
}

// Long enough sequences are cut on multiples of kContextChunkGranule (the GPU kernels' tiles),
// still covering every position once, each chunk within a granule of T / 2N.
TEST(ContextShard, LongSequencesAreCutOnGranuleBoundaries) {
  constexpr int G = kContextChunkGranule;
  for (const int N : {2, 3}) {
    for (const int T : {2 * N * G, 2 * N * G + 1, 1000 * N + 77, 131072}) {
      std::multiset<int> seen;
      for (int r = 0; r < N; ++r) {
        const ContextShard shard = context_shard(T, N, r);
        seen.insert(shard.positions.begin(), shard.positions.end());
        for (size_t i = 0; i < shard.positions.size(); ++i) {
          const bool starts_chunk = i == 0 || shard.positions[i] != shard.positions[i - 1] + 1;
          if (starts_chunk) {
            EXPECT_EQ(shard.positions[i] % G, 0) << "T " << T << " N " << N;
          }
        }
        EXPECT_NEAR(shard.local_len(), 2.0 * T / (2 * N), 2.0 * G) << "T " << T << " N " << N;
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(T));
      EXPECT_EQ(*seen.rbegin(), T - 1);
    }
  }
  // Below 2N granules the chunks are cut anywhere (the CPU path trains any T >= 2N).
  EXPECT_EQ(context_shard(2 * 2 * G - 1, 2, 1).positions.front(), (4 * G - 1) / 4);
}

TEST(ThreadCommunicatorSplit, GroupsAddOnlyTheirOwnRanks) {
  run_ranks(4, [](int rank, Communicator& comm) {
    const std::unique_ptr<Communicator> group = comm.split(rank % 2, rank);
    EXPECT_EQ(group->world_size(), 2);
    EXPECT_EQ(group->rank(), rank / 2);
    float value = static_cast<float>(rank);
    group->all_reduce(&value, 1, ReduceOp::kSum);
    EXPECT_EQ(value, rank % 2 == 0 ? 2.0f : 4.0f);
  });
}

constexpr int kT = 13;  // not divisible by 4 or 6

ModelOptions small_options(int batch_size) {
  ModelOptions options;
  options.config = testing::model_config(16, 300, 320, 2, 2, 16);
  options.batch_size = batch_size;
  options.seq_len = kT;
  return options;
}

struct Trained {
  std::vector<float> losses, norms, grads, params, m, v;
};

// `steps` steps of `micro` micro-batches of (D*B, T) batches; rank = dp * N + cp takes rows
// dp, dp + D, ... (the loader's dealing) and, of each, its context group's share.
Trained train(Communicator& comm, int N, int B, int steps, int micro, int zero) {
  const int world = comm.world_size(), rank = comm.rank(), D = world / N;
  const std::unique_ptr<Communicator> group = comm.split(rank / N, rank);
  ModelOptions options = small_options(B);
  options.comm = &comm;
  options.context_comm = group.get();
  options.zero_stage = zero;
  std::unique_ptr<Model> model = make_cpu_model(options);
  const size_t n = ParameterLayout::for_config(options.config).total;
  std::vector<float> params(n);
  init_parameters(params.data(), options.config, 5);
  model->set_parameters(params.data());
  const ContextShard shard = context_shard(kT, N, group->rank());
  const int V = options.config.vocab_size;
  AdamWHyper hyper;
  hyper.lr = 1e-3f;
  Trained result;
  for (int step = 1; step <= steps; ++step) {
    model->zero_grad();
    double loss = 0.0;
    for (int k = 0; k < micro; ++k) {
      const std::vector<int> inputs = random_tokens(size_t(D) * B * kT, V, 100 * step + k);
      const std::vector<int> targets = random_tokens(inputs.size(), V, 100 * step + k + 50);
      std::vector<int> rows_in(size_t(B) * kT), rows_tg(rows_in.size());
      for (int b = 0; b < B; ++b) {
        const size_t row = static_cast<size_t>(b) * D + rank / N;
        std::copy(inputs.begin() + row * kT, inputs.begin() + (row + 1) * kT,
                  rows_in.begin() + b * kT);
        std::copy(targets.begin() + row * kT, targets.begin() + (row + 1) * kT,
                  rows_tg.begin() + b * kT);
      }
      std::vector<int> local_in(size_t(B) * shard.local_len()), local_tg(local_in.size());
      shard.select(rows_in.data(), local_in.data(), B);
      shard.select(rows_tg.data(), local_tg.data(), B);
      loss += model->forward_backward(local_in.data(), local_tg.data(), 1.0f / (D * micro));
    }
    model->reduce_gradients();
    result.losses.push_back(static_cast<float>(sum_in_rank_order(comm, loss) / (D * micro)));
    result.norms.push_back(model->grad_norm());
    if (step == 1 && zero == 0) {
      const CpuGpt2<float>& gpt2 = static_cast<CpuModel&>(*model).gpt2();
      result.grads.assign(gpt2.grads(), gpt2.grads() + n);
    }
    model->adamw_step(hyper, step, 1.0f);
  }
  result.params.resize(n);
  result.m.resize(n);
  result.v.resize(n);
  model->get_parameters(result.params.data());
  model->get_optimizer_state(result.m.data(), result.v.data());
  return result;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0, worst = 0.0;
  for (const float x : want) scale = std::max(scale, std::fabs(double(x)));
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  std::printf("[ compare  ] %-10s max |difference| %.3g (largest value %.3g)\n", what, worst,
              scale);
  EXPECT_LE(worst, tol * std::max(1.0, scale)) << what;
}

void expect_trains_like_one_rank(int N, int D) {
  constexpr int kB = 2, kSteps = 3, kMicro = 2;
  Trained one;
  run_ranks(1, [&](int, Communicator& comm) { one = train(comm, 1, D * kB, kSteps, kMicro, 0); });
  for (const int zero : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "context " << N << " x data " << D << ", ZeRO-" << zero);
    std::vector<Trained> ranks(static_cast<size_t>(N * D));
    run_ranks(N * D, [&](int rank, Communicator& comm) {
      ranks[static_cast<size_t>(rank)] = train(comm, N, kB, kSteps, kMicro, zero);
    });
    for (size_t r = 1; r < ranks.size(); ++r) {
      EXPECT_EQ(ranks[r].params, ranks[0].params) << "rank " << r;
      EXPECT_EQ(ranks[r].losses, ranks[0].losses) << "rank " << r;
    }
    expect_close(ranks[0].losses, one.losses, 1e-6, "losses");
    expect_close(ranks[0].norms, one.norms, 1e-6, "norms");
    if (zero == 0) expect_close(ranks[0].grads, one.grads, 1e-6, "gradient");
    expect_close(ranks[0].params, one.params, 1e-6, "parameters");
    expect_close(ranks[0].m, one.m, 1e-6, "AdamW m");
  }
}

TEST(CpuContextParallel, AGroupOfTwoTrainsLikeOneRank) { expect_trains_like_one_rank(2, 1); }
TEST(CpuContextParallel, AGroupOfThreeTrainsLikeOneRank) { expect_trains_like_one_rank(3, 1); }
TEST(CpuContextParallel, TwoGroupsOfTwoTrainLikeOneRankOfTheirBatch) {
  expect_trains_like_one_rank(2, 2);
}

TEST(CpuContextParallel, NaiveAttentionIsRefusedAndThePlanHoldsTheRanksRows) {
  run_ranks(2, [](int rank, Communicator& comm) {
    ModelOptions options = small_options(2);
    options.comm = &comm;
    options.context_comm = &comm;
    options.attention = AttentionKind::kNaive;
    EXPECT_THROW(plan_cpu_model_memory(options), UsageError);
    options.attention = AttentionKind::kFlash;
    EXPECT_EQ(options.local_seq_len(), context_shard(kT, 2, rank).local_len());
    const MemoryPlan plan = plan_cpu_model_memory(options);
    bool exchange = false;
    for (const MemoryItem& item : plan.items)
      exchange = exchange || item.name.find("context parallel") != std::string::npos;
    EXPECT_TRUE(exchange) << plan.to_string("plan");
    std::unique_ptr<Model> model = make_cpu_model(options);
    EXPECT_EQ(static_cast<CpuModel&>(*model).gpt2().seq_len(), options.local_seq_len());
  });
}

}  // namespace
}  // namespace gpt2
