// The CPU model's data parallelism with ranks as threads (thread_communicator.h): 2 and 3 ranks,
// ZeRO 0 and 1, buckets of 1000 elements (many collectives, and at 3 ranks a padded last bucket
// through the staging buffer) and of the default size. Every rank ends with the same bits;
// ZeRO 0 and ZeRO 1 give the same bits (the board adds in rank order for both); the summed
// gradient and the norms are one model's on the whole batch (the parameters after AdamW are
// compared end to end at the default learning rate in tests/train/data_parallel_test.cpp: on
// this model of random tokens some gradient elements are as small as their rounding, and AdamW
// divides by their RMS); the gathered AdamW state continues a fresh set of ranks bit for bit;
// the norm and the update need reduce_gradients first.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "base/bf16.h"
#include "base/error.h"
#include "base/rng.h"
#include "parallel/shard_plan.h"
#include "model/cpu_model.h"
#include "model/model.h"
#include "model/parameters.h"
#include "thread_communicator.h"
#include "test_fixtures.h"

namespace gpt2 {
namespace {

using testing::random_tokens;

using testing::run_ranks;

constexpr int kT = 16;

ModelOptions small_options(int batch_size) {
  ModelOptions options;
  options.config = testing::model_config(32, 500, 512, 2, 2, 64);
  options.batch_size = batch_size;
  options.seq_len = kT;
  return options;
}

// Rows r, r + world, r + 2 world, ... of a (world*B, T) batch: how the loader deals windows.
std::vector<int> rank_rows(const std::vector<int>& global, int world, int rank, int B) {
  std::vector<int> rows(static_cast<size_t>(B * kT));
  for (int b = 0; b < B; ++b) {
    const int* row = global.data() + (b * world + rank) * kT;
    std::copy(row, row + kT, rows.data() + b * kT);
  }
  return rows;
}

struct Trained {
  std::vector<float> params, m, v, norms;
};

AdamWHyper hyper() {
  AdamWHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.1f;
  return h;
}

// One optimizer step on the step's global batch: each rank its rows, loss scale 1/world.
void train_step(Model& model, int world, int rank, int B, int step, float clip,
                std::vector<float>* norms) {
  const ModelConfig& config = model.options().config;
  const std::vector<int> inputs = random_tokens(size_t(world * B * kT), config.vocab_size, 100 + step);
  const std::vector<int> targets = random_tokens(size_t(world * B * kT), config.vocab_size, 200 + step);
  model.zero_grad();
  model.forward_backward(rank_rows(inputs, world, rank, B).data(),
                         rank_rows(targets, world, rank, B).data(), 1.0f / world);
  model.reduce_gradients();
  const float norm = model.grad_norm();
  if (norms) norms->push_back(norm);
  model.adamw_step(hyper(), step, clip > 0 && norm > clip ? clip / norm : 1.0f);
}

void initialize(Model& model) {
  std::vector<float> params(ParameterLayout::for_config(model.options().config).total);
  init_parameters(params.data(), model.options().config, 7);
  model.set_parameters(params.data());
}

// `steps` steps on `world` ranks of B rows each; what every rank holds at the end.
std::vector<Trained> train_ranks(int world, int zero, size_t bucket_elements, int B, int steps,
                                 float clip) {
  std::vector<Trained> result(static_cast<size_t>(world));
  run_ranks(world, [&](int rank, Communicator& comm) {
    ModelOptions options = small_options(B);
    options.comm = &comm;
    options.zero_stage = zero;
    options.bucket_elements = bucket_elements;
    std::unique_ptr<Model> model = make_cpu_model(options);
    initialize(*model);
    Trained& mine = result[static_cast<size_t>(rank)];
    for (int step = 1; step <= steps; ++step) train_step(*model, world, rank, B, step, clip, &mine.norms);
    const size_t n = ParameterLayout::for_config(options.config).total;
    mine.params.resize(n);
    mine.m.resize(n);
    mine.v.resize(n);
    model->get_parameters(mine.params.data());
    model->get_optimizer_state(mine.m.data(), mine.v.data());  // collective under ZeRO-1
  });
  return result;
}

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::fabs(double(a[i]) - b[i]) > worst) {
      worst = std::fabs(double(a[i]) - b[i]);
      at = i;
    }
  std::printf("[ compare  ] max |difference| %g at element %zu (%g vs %g)\n", worst, at, a[at],
              b[at]);
  return worst;
}

TEST(CpuDataParallel, RanksAndZeroStagesAgreeBitForBitAndNormsAreOneModels) {
  constexpr int kSteps = 3, kB = 2;
  constexpr float kClip = 1.0f;
  for (const int world : {2, 3}) {
    const Trained single = train_ranks(1, 0, kDefaultBucketElements, world * kB, kSteps, kClip)[0];
    for (const size_t bucket : {size_t{1000}, kDefaultBucketElements}) {
      SCOPED_TRACE(::testing::Message() << "world " << world << ", buckets of " << bucket);
      if (world == 3 && bucket == 1000) {  // the case that exercises the staging buffer
        const ShardPlan plan(single.params.size(), world, 0, bucket);
        ASSERT_GT(plan.buckets().back().size, plan.buckets().back().valid);
      }
      const std::vector<Trained> zero0 = train_ranks(world, 0, bucket, kB, kSteps, kClip);
      const std::vector<Trained> zero1 = train_ranks(world, 1, bucket, kB, kSteps, kClip);
      for (int rank = 0; rank < world; ++rank) {
        for (const std::vector<Trained>* run : {&zero0, &zero1}) {
          const Trained& got = (*run)[static_cast<size_t>(rank)];
          EXPECT_EQ(got.params, zero0[0].params) << "rank " << rank;
          EXPECT_EQ(got.m, zero0[0].m) << "rank " << rank;
          EXPECT_EQ(got.v, zero0[0].v) << "rank " << rank;
          EXPECT_EQ(got.norms, zero0[0].norms) << "rank " << rank;
        }
      }
      for (int step = 0; step < kSteps; ++step)
        EXPECT_NEAR(zero1[0].norms[step], single.norms[step], 1e-6 * single.norms[step]);
      EXPECT_GT(single.norms[0], kClip) << "clipping was not active";
    }
  }
}

// The gradient after reduce_gradients (ZeRO-0: every rank holds all of it) against one model's
// on the whole batch, within 1e-6 of the largest element.
TEST(CpuDataParallel, SummedGradientIsOneModelsOnTheWholeBatch) {
  constexpr int kB = 2;
  const auto gradient = [](int world, size_t bucket) {
    std::vector<float> grads;
    run_ranks(world, [&](int rank, Communicator& comm) {
      ModelOptions options = small_options(kB * (world == 1 ? 3 : 1));
      options.comm = &comm;
      options.bucket_elements = bucket;
      std::unique_ptr<Model> model = make_cpu_model(options);
      initialize(*model);
      const int rows = world == 1 ? 3 * kB : kB, ranks = world == 1 ? 1 : world;
      const ModelConfig& config = options.config;
      const std::vector<int> inputs = random_tokens(size_t(3 * kB * kT), config.vocab_size, 31);
      const std::vector<int> targets = random_tokens(size_t(3 * kB * kT), config.vocab_size, 32);
      model->zero_grad();
      model->forward_backward(rank_rows(inputs, ranks, rank, rows).data(),
                              rank_rows(targets, ranks, rank, rows).data(), 1.0f / ranks);
      model->reduce_gradients();
      if (rank != 0) return;
      const CpuGpt2<float>& gpt2 = static_cast<CpuModel&>(*model).gpt2();
      grads.assign(gpt2.grads(), gpt2.grads() + gpt2.num_parameters());
    });
    return grads;
  };
  const std::vector<float> single = gradient(1, kDefaultBucketElements);
  double largest = 0;
  for (const float g : single) largest = std::max(largest, std::fabs(double(g)));
  for (const size_t bucket : {size_t{1000}, kDefaultBucketElements}) {
    SCOPED_TRACE(::testing::Message() << "buckets of " << bucket);
    EXPECT_LE(max_difference(gradient(3, bucket), single), 1e-6 * largest);
  }
}

// --grad-reduce bf16: each rank's fp32 gradient rounded to bf16, the ranks' values added in rank
// order with a bf16 rounding after each addition (add_bf16), widened back: bit for bit, on
// every element a rank holds after the reduction (ZeRO-0: all; ZeRO-1: its blocks), with
// buckets that leave a padded tail at 3 ranks.
TEST(CpuDataParallel, Bf16SumsRoundEachGradientAndEachAddition) {
  constexpr int kWorld = 3, kB = 1;
  constexpr size_t kBucket = 1000;
  for (const int zero : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "ZeRO-" << zero);
    std::vector<std::vector<float>> local(kWorld), reduced(kWorld);
    std::vector<ShardPlan> plans(kWorld);
    run_ranks(kWorld, [&](int rank, Communicator& comm) {
      ModelOptions options = small_options(kB);
      options.comm = &comm;
      options.zero_stage = zero;
      options.bucket_elements = kBucket;
      options.grad_reduce = GradReduce::kBf16;
      std::unique_ptr<Model> model = make_cpu_model(options);
      initialize(*model);
      const ModelConfig& config = options.config;
      const size_t rows = size_t(kWorld * kB * kT);
      const std::vector<int> inputs = random_tokens(rows, config.vocab_size, 41);
      const std::vector<int> targets = random_tokens(rows, config.vocab_size, 42);
      model->zero_grad();
      model->forward_backward(rank_rows(inputs, kWorld, rank, kB).data(),
                              rank_rows(targets, kWorld, rank, kB).data(), 1.0f / kWorld);
      CpuModel& cpu = static_cast<CpuModel&>(*model);
      const float* grads = cpu.gpt2().grads();
      const size_t n = cpu.gpt2().num_parameters();
      local[static_cast<size_t>(rank)].assign(grads, grads + n);
      model->reduce_gradients();
      reduced[static_cast<size_t>(rank)].assign(grads, grads + n);
      plans[static_cast<size_t>(rank)] = cpu.shard_plan();
    });
    const size_t n = local[0].size();
    std::vector<float> expected(n);
    for (size_t i = 0; i < n; ++i) {
      uint16_t sum = float_to_bf16_bits(local[0][i]);
      for (int r = 1; r < kWorld; ++r) sum = add_bf16(sum, float_to_bf16_bits(local[r][i]));
      expected[i] = bf16_bits_to_float(sum);
    }
    ASSERT_GT(plans[0].buckets().back().size, plans[0].buckets().back().valid);
    size_t checked_over_ranks = 0;
    for (int rank = 0; rank < kWorld; ++rank) {
      const ShardPlan& plan = plans[static_cast<size_t>(rank)];
      size_t checked = 0, differ = 0;
      for (size_t k = 0; k < plan.buckets().size(); ++k) {
        const ShardRange range = plan.local_range(k);
        const size_t begin = zero == 1 ? range.begin : plan.buckets()[k].begin;
        const size_t count = zero == 1 ? range.count : plan.buckets()[k].valid;
        for (size_t i = begin; i < begin + count; ++i, ++checked)
          if (reduced[rank][i] != expected[i]) ++differ;
      }
      EXPECT_EQ(differ, 0u) << "rank " << rank << ": " << differ << " of " << checked;
      checked_over_ranks += checked;
    }
    EXPECT_EQ(checked_over_ranks, zero == 1 ? n : kWorld * n);  // every element, by its owners
  }
}

TEST(CpuDataParallel, GatheredStateContinuesFreshRanksBitForBit) {
  constexpr int kWorld = 3, kB = 1;
  run_ranks(kWorld, [&](int rank, Communicator& comm) {
    ModelOptions options = small_options(kB);
    options.comm = &comm;
    options.zero_stage = 1;
    options.bucket_elements = 1000;
    std::unique_ptr<Model> a = make_cpu_model(options);
    initialize(*a);
    for (int step = 1; step <= 2; ++step) train_step(*a, kWorld, rank, kB, step, 0.0f, nullptr);
    const size_t n = ParameterLayout::for_config(options.config).total;
    std::vector<float> params(n), m(n), v(n);
    a->get_parameters(params.data());
    a->get_optimizer_state(m.data(), v.data());
    std::unique_ptr<Model> b = make_cpu_model(options);
    b->set_parameters(params.data());
    b->set_optimizer_state(m.data(), v.data());
    std::vector<float> m2(n), v2(n);
    b->get_optimizer_state(m2.data(), v2.data());
    EXPECT_EQ(m, m2);
    EXPECT_EQ(v, v2);
    train_step(*a, kWorld, rank, kB, 3, 0.0f, nullptr);
    train_step(*b, kWorld, rank, kB, 3, 0.0f, nullptr);
    std::vector<float> pa(n), pb(n);
    a->get_parameters(pa.data());
    b->get_parameters(pb.data());
    EXPECT_EQ(pa, pb);
  });
}

TEST(CpuDataParallel, NormAndUpdateNeedTheReducedGradients) {
  run_ranks(2, [&](int rank, Communicator& comm) {
    ModelOptions options = small_options(1);
    options.comm = &comm;
    options.zero_stage = 1;
    std::unique_ptr<Model> model = make_cpu_model(options);
    initialize(*model);
    const std::vector<int> tokens = random_tokens(kT, options.config.vocab_size, 5 + rank);
    model->zero_grad();
    model->forward_backward(tokens.data(), tokens.data(), 0.5f);
    EXPECT_THROW(model->grad_norm(), Error);
    EXPECT_THROW(model->adamw_step(hyper(), 1, 1.0f), Error);
    model->reduce_gradients();
    EXPECT_GT(model->grad_norm(), 0.0f);
    model->forward_backward(tokens.data(), tokens.data(), 0.5f);  // the gradients changed
    EXPECT_THROW(model->grad_norm(), Error);
  });
}

TEST(CpuDataParallel, MemoryPlanHoldsTheShardAndTheStaging) {
  run_ranks(3, [&](int rank, Communicator& comm) {
    ModelOptions options = small_options(1);
    options.comm = &comm;
    options.zero_stage = 1;
    options.bucket_elements = 1000;
    const size_t n = ParameterLayout::for_config(options.config).total;
    const ShardPlan plan(n, 3, rank, 1000);
    const MemoryPlan memory = plan_cpu_model_memory(options);
    EXPECT_EQ(memory.group_total("optimizer"), 2 * plan.local_elements() * sizeof(float));
    EXPECT_EQ(memory.group_total("gradients"), n * sizeof(float));
    bool staging = false;
    for (const MemoryItem& item : memory.items)
      if (item.name.find("staging of the padded last bucket") != std::string::npos) {
        staging = true;
        EXPECT_EQ(item.bytes, plan.buckets().back().size * sizeof(float));
      }
    EXPECT_TRUE(staging);
    options.zero_stage = 0;
    EXPECT_EQ(plan_cpu_model_memory(options).group_total("optimizer"), 2 * n * sizeof(float));
    options.zero_stage = 2;
    EXPECT_THROW(plan_cpu_model_memory(options), UsageError);
  });
}

TEST(CpuDataParallel, OneProcessIgnoresTheStageAndReducesNothing) {
  SingleProcessCommunicator single;
  ModelOptions options = small_options(2);
  options.comm = &single;
  options.zero_stage = 1;
  std::unique_ptr<Model> model = make_cpu_model(options);
  initialize(*model);
  const size_t n = ParameterLayout::for_config(options.config).total;
  EXPECT_EQ(model->memory_plan().group_total("optimizer"), 2 * n * sizeof(float));
  const std::vector<int> tokens = random_tokens(2 * kT, options.config.vocab_size, 3);
  model->zero_grad();
  model->forward_backward(tokens.data(), tokens.data(), 1.0f);
  const float before = model->grad_norm();  // no reduce_gradients needed on one process
  model->reduce_gradients();
  EXPECT_EQ(model->grad_norm(), before);
  EXPECT_EQ(single.stats().calls, 0);
}

}  // namespace
}  // namespace gpt2
