// The CUDA model's data parallelism (model/cuda_data_parallel.h) over NCCL:
// - the bucket bookkeeping (ready points, update segments) against brute force, on the host;
// - world size 1 through NCCL is the plain single-GPU model bit for bit (fp32 and bf16, sums in
//   fp32 and bf16, ZeRO 0 and 1, communication overlapped or not, two micro-batches, small
//   buckets so there are many), step by step (grad_norm, adamw_step) and through finish_step
//   with CUDA graphs (the collectives captured);
// - the calls out of order are refused, and so is a forward-only call before the parameters
//   of an overlapped ZeRO-1 update were gathered;
// - with 2 GPUs (ranks as threads, NCCL between them): 2 ranks x B=2 give one GPU's B=4 losses,
//   norms and AdamW first moment in fp32, and both ranks hold the same parameters bit for bit;
//   the overlapped gathers and reductions give the bits of the blocking ones; bf16 sums stay
//   within a bound of fp32 sums.
// The GPU tests skip without a GPU or NCCL, the 2-GPU one with fewer than 2 GPUs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "base/rng.h"
#include "parallel/communicator.h"
#include "parallel/nccl_communicator.h"
#include "parallel/shard_plan.h"
#include "gpu/gpu_test_util.h"
#include "gpu/multi_gpu_test_util.h"
#include "model/cuda_data_parallel.h"
#include "model/cuda_model.h"
#include "model/parameters.h"
#include "model/thread_communicator.h"
#include "test_fixtures.h"

namespace gpt2 {
namespace {

using testing::max_relative_difference;
using testing::random_tokens;

constexpr int kT = 24;

ModelConfig small_config() { return testing::model_config(32, 250, 256, 3, 2, 128); }

// ---------------------------------------------------------------------------------------------
// Bookkeeping (host only)

// Element by element, in the layer-major order: the backward point after which the backward
// never writes it again, and the forward point before which the forward first reads it.
struct ElementPoints {
  std::vector<int> ready, need;
};
ElementPoints element_points(const LayerMajorLayout& layout) {
  const int L = layout.num_layers();
  ElementPoints points;
  points.ready.resize(layout.total());
  points.need.resize(layout.total());
  for (const ParameterSlice& slice : layout.slices()) {
    int ready = 0, need = 0;
    if (slice.tensor == kWte || slice.tensor == kWpe) {
      ready = L + 1;
      need = 0;
    } else if (slice.tensor == kLnfw || slice.tensor == kLnfb) {
      ready = 0;
      need = L;
    } else {
      ready = L - slice.layer;
      need = slice.tensor == kLn1w || slice.tensor == kLn1b ? slice.layer : slice.layer + 1;
    }
    for (size_t i = 0; i < slice.size; ++i) {
      points.ready[slice.offset + i] = ready;
      points.need[slice.offset + i] = need;
    }
  }
  return points;
}

TEST(CudaDataParallelPlan, ReadyAndNeedPointsAreEachBucketsLastAndFirst) {
  const LayerMajorLayout layout(small_config());
  const int L = layout.num_layers();
  const ElementPoints element = element_points(layout);
  for (const int world : {1, 2, 3}) {
    for (const size_t bucket_elements : {size_t{1000}, kDefaultLayerBucketElements}) {
      const ShardPlan plan =
          gradient_bucket_plan(small_config(), DeviceKind::kCuda, bucket_elements, world, 0);
      const std::vector<int> ready = bucket_ready_points(plan, layout.slices(), L);
      const std::vector<int> need = bucket_need_points(plan, layout.slices(), L);
      ASSERT_EQ(ready.size(), plan.buckets().size());
      ASSERT_EQ(need.size(), plan.buckets().size());
      for (size_t k = 0; k < ready.size(); ++k) {
        const GradientBucket& bucket = plan.buckets()[k];
        const auto first = static_cast<std::ptrdiff_t>(bucket.begin);
        const auto last = static_cast<std::ptrdiff_t>(bucket.begin + bucket.valid);
        EXPECT_EQ(ready[k], *std::max_element(element.ready.begin() + first,
                                              element.ready.begin() + last))
            << "world " << world << " bucket " << k;
        EXPECT_EQ(need[k], *std::min_element(element.need.begin() + first,
                                             element.need.begin() + last))
            << "world " << world << " bucket " << k;
      }
    }
  }
}

// The layer buckets: each layer whole in one bucket at the default size (a few elements of the
// next layer's ln1 at most, to round it to a multiple of the world size), ready at its own
// layer's point and never later.
TEST(CudaDataParallelPlan, EachLayerIsABucketOfItsOwn) {
  const LayerMajorLayout layout(small_config());
  const int L = layout.num_layers();
  for (const int world : {1, 2, 3}) {
    const ShardPlan plan =
        gradient_bucket_plan(small_config(), DeviceKind::kCuda, 0, world, 0);
    const std::vector<int> ready = bucket_ready_points(plan, layout.slices(), L);
    for (int l = 0; l < L; ++l) {
      // The bucket that holds the layer from its world-th element (the bucket before may take
      // fewer than world of them) to its end, and stops fewer than world elements past it.
      const size_t inside = layout.layer_begin(l) + static_cast<size_t>(world) - 1;
      size_t k = 0;
      while (plan.buckets()[k].begin + plan.buckets()[k].size <= inside) ++k;
      const GradientBucket& bucket = plan.buckets()[k];
      EXPECT_GE(bucket.begin + bucket.size, layout.layer_begin(l + 1)) << "layer " << l;
      EXPECT_LT(bucket.begin + bucket.size, layout.layer_begin(l + 1) + world) << "layer " << l;
      EXPECT_EQ(ready[k], L - l) << "world " << world << " layer " << l;
    }
  }
}

TEST(CudaDataParallelPlan, UpdateSegmentsCoverEachRanksShardWithinSlices) {
  const LayerMajorLayout layout(small_config());
  const std::vector<UpdateSegment> whole = update_segments(
      gradient_bucket_plan(small_config(), DeviceKind::kCuda, 1000, 1, 0), layout.slices(),
      /*sharded=*/false);
  ASSERT_EQ(whole.size(), layout.slices().size());
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(whole[i].flat, layout.slices()[i].offset);
    EXPECT_EQ(whole[i].local, layout.slices()[i].offset);
    EXPECT_EQ(whole[i].count, layout.slices()[i].size);
    EXPECT_EQ(whole[i].tensor, layout.slices()[i].tensor);
  }
  std::vector<int> tensor_of(layout.total());
  for (const ParameterSlice& slice : layout.slices())
    std::fill(tensor_of.begin() + static_cast<std::ptrdiff_t>(slice.offset),
              tensor_of.begin() + static_cast<std::ptrdiff_t>(slice.offset + slice.size),
              slice.tensor);
  for (const int world : {2, 3}) {
    std::vector<int> owner(layout.total(), -1);
    for (int rank = 0; rank < world; ++rank) {
      const ShardPlan plan =
          gradient_bucket_plan(small_config(), DeviceKind::kCuda, 1000, world, rank);
      std::vector<bool> local_used(plan.local_elements(), false);
      for (const UpdateSegment& s : update_segments(plan, layout.slices(), /*sharded=*/true)) {
        ASSERT_LE(s.local + s.count, plan.local_elements());
        for (size_t i = 0; i < s.count; ++i) {
          EXPECT_EQ(tensor_of[s.flat + i], s.tensor) << "element " << s.flat + i;
          EXPECT_EQ(owner[s.flat + i], -1) << "element " << s.flat + i << " updated twice";
          owner[s.flat + i] = rank;
          EXPECT_FALSE(local_used[s.local + i]);
          local_used[s.local + i] = true;
        }
      }
    }
    EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0) << "world " << world;
  }
}

// The layer-major order holds every value of llm.c's once, and the conversions invert.
TEST(LayerMajorLayout, ConvertsToAndFromLlmcOrder) {
  const ModelConfig config = small_config();
  const LayerMajorLayout layout(config);
  const ParameterLayout llmc = ParameterLayout::for_config(config);
  ASSERT_EQ(layout.total(), llmc.total);
  std::vector<float> values(llmc.total), ordered(llmc.total), back(llmc.total);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  layout.from_llmc(values.data(), ordered.data());
  layout.to_llmc(ordered.data(), back.data());
  EXPECT_EQ(back, values);
  const size_t C = static_cast<size_t>(config.channels);
  // Layer 1's qkvw in llm.c's order starts one layer into qkvw; here, in layer 1's range.
  EXPECT_EQ(ordered[layout.offset(kQkvw, 1)], float(llmc.offsets[kQkvw] + 3 * C * C));
  EXPECT_EQ(ordered[layout.offset(kLnfb)], float(llmc.offsets[kLnfb]));
  EXPECT_EQ(layout.offset(kLn1w, 0), llmc.sizes[kWte] + llmc.sizes[kWpe]);
  EXPECT_EQ(layout.layer_begin(layout.num_layers()), layout.offset(kLnfw));
  std::vector<float> sorted = ordered;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, values);  // a permutation
}

// ---------------------------------------------------------------------------------------------
// Training through NCCL

// Rows r, r + world, ... of a (world*B, T) batch, as the loader deals them to rank r.
std::vector<int> rank_rows(const std::vector<int>& global, int world, int rank, int B) {
  std::vector<int> rows(static_cast<size_t>(B) * kT);
  for (int b = 0; b < B; ++b) {
    const int* row = global.data() + static_cast<size_t>(b * world + rank) * kT;
    std::copy(row, row + kT, rows.data() + static_cast<size_t>(b) * kT);
  }
  return rows;
}

struct Trained {
  std::vector<float> losses, norms, params, m, v;
};

struct RunSpec {
  Precision precision = Precision::kFp32;
  GradReduce grad_reduce = GradReduce::kFp32;
  int zero_stage = 0;
  bool overlap = true;
  int micro_batches = 1;
  size_t bucket_elements = 4096;
  bool finish_step = false;  // the one-round-trip step (graphs); else grad_norm + adamw_step
  int steps = 3;
};

// kSteps steps; each micro-batch of each step is a (world*B, T) batch dealt over the ranks.
// comm: nullptr for the plain single-GPU model.
Trained train(Communicator* comm, int world, int rank, int B, const RunSpec& spec) {
  ModelOptions options;
  options.config = small_config();
  options.batch_size = B;
  options.seq_len = kT;
  options.precision = spec.precision;
  options.comm = comm;
  options.zero_stage = spec.zero_stage;
  options.bucket_elements = spec.bucket_elements;
  options.overlap_communication = spec.overlap;
  options.overlap_gather = spec.overlap;
  options.grad_reduce = spec.grad_reduce;
  std::unique_ptr<Model> model = make_cuda_model(options);
  const size_t n = ParameterLayout::for_config(options.config).total;
  std::vector<float> params(n);
  init_parameters(params.data(), options.config, 11);
  model->set_parameters(params.data());
  AdamWHyper hyper;
  hyper.lr = 1e-3f;
  hyper.weight_decay = 0.1f;
  const int V = options.config.vocab_size;
  const float loss_scale = 1.0f / static_cast<float>(world * spec.micro_batches);
  Trained result;
  for (int step = 1; step <= spec.steps; ++step) {
    model->zero_grad();
    double loss = 0.0;
    for (int micro = 0; micro < spec.micro_batches; ++micro) {
      const size_t rows = static_cast<size_t>(world) * B * kT;
      const uint64_t seed = 1000 * step + 10 * micro;
      const std::vector<int> inputs = random_tokens(rows, V, seed);
      const std::vector<int> targets = random_tokens(rows, V, seed + 1);
      if (micro + 1 == spec.micro_batches) model->expect_last_micro_batch();
      const std::vector<int> my_inputs = rank_rows(inputs, world, rank, B);
      const std::vector<int> my_targets = rank_rows(targets, world, rank, B);
      if (spec.finish_step) {
        model->queue_forward_backward(my_inputs.data(), my_targets.data(), loss_scale);
      } else {
        loss += model->forward_backward(my_inputs.data(), my_targets.data(), loss_scale);
      }
    }
    model->reduce_gradients();
    if (spec.finish_step) {
      // Every rank's losses, summed over the ranks: world * micro_batches micro-batches.
      const Model::StepOutcome outcome =
          model->finish_step(hyper, step, 1.0f, world * spec.micro_batches);
      result.losses.push_back(outcome.loss);
      result.norms.push_back(outcome.grad_norm);
      continue;
    }
    result.losses.push_back(static_cast<float>(loss));
    const float norm = model->grad_norm();
    result.norms.push_back(norm);
    model->adamw_step(hyper, step, norm > 1.0f ? 1.0f / norm : 1.0f);  // clipping active
  }
  result.params.resize(n);
  result.m.resize(n);
  result.v.resize(n);
  model->get_parameters(result.params.data());                 // collective (bf16 ZeRO-1)
  model->get_optimizer_state(result.m.data(), result.v.data());  // collective (ZeRO-1)
  return result;
}

TEST(CudaDataParallel, WorldOneThroughNcclIsThePlainModelBitForBit) {
  GPT2_REQUIRE_NCCL();
#ifdef GPT2_WITH_NCCL
  for (const bool finish_step : {false, true}) {
    for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
      RunSpec plain_spec;
      plain_spec.precision = precision;
      plain_spec.micro_batches = 2;
      plain_spec.finish_step = finish_step;
      plain_spec.steps = finish_step ? 4 : 3;  // 4: every kind of micro-batch replays a graph
      const Trained plain = train(nullptr, 1, 0, 2, plain_spec);
      std::vector<GradReduce> reductions = {GradReduce::kFp32};
      if (precision == Precision::kBf16) reductions.push_back(GradReduce::kBf16);
      for (const GradReduce reduce : reductions) {
        for (const int zero : {0, 1}) {
          for (const bool overlap : {true, false}) {
            SCOPED_TRACE(::testing::Message()
                         << to_string(precision) << " sums in " << to_string(reduce) << " ZeRO-"
                         << zero << (overlap ? " overlapped" : " after each phase")
                         << (finish_step ? ", finish_step" : ", grad_norm + adamw_step"));
            RunSpec spec = plain_spec;
            spec.grad_reduce = reduce;
            spec.zero_stage = zero;
            spec.overlap = overlap;
            SingleProcessCommunicator host;
            NcclCommunicator nccl(host);
            const Trained got = train(&nccl, 1, 0, 2, spec);
            EXPECT_EQ(got.losses, plain.losses);
            EXPECT_EQ(got.norms, plain.norms);
            EXPECT_EQ(got.params, plain.params);
            EXPECT_EQ(got.m, plain.m);
            EXPECT_EQ(got.v, plain.v);
            EXPECT_GT(nccl.stats().calls, 0) << "nothing went through NCCL";
          }
        }
      }
    }
  }
#endif
}

// One rank of ZeRO-1 through `comm`, B=1.
ModelOptions one_rank_options(Communicator& comm) {
  ModelOptions options;
  options.config = small_config();
  options.batch_size = 1;
  options.seq_len = kT;
  options.comm = &comm;
  options.zero_stage = 1;
  return options;
}

TEST(CudaDataParallel, ForwardOnlyCallsWaitForTheOverlappedGather) {
  GPT2_REQUIRE_NCCL();
#ifdef GPT2_WITH_NCCL
  SingleProcessCommunicator host;
  NcclCommunicator nccl(host);
  ModelOptions options = one_rank_options(nccl);
  options.precision = Precision::kBf16;
  options.grad_reduce = GradReduce::kBf16;
  options.overlap_gather = true;
  std::unique_ptr<Model> model = make_cuda_model(options);
  const std::vector<int> tokens = random_tokens(kT, options.config.vocab_size, 7);
  model->zero_grad();
  model->expect_last_micro_batch();
  model->queue_forward_backward(tokens.data(), tokens.data(), 1.0f);
  model->reduce_gradients();
  model->finish_step(AdamWHyper{}, 1, 1.0f, 1);
  EXPECT_THROW(model->evaluate(tokens.data(), tokens.data()), Error);
  EXPECT_THROW(model->start_generation(1, kT), Error);
  model->synchronize_parameters();
  EXPECT_TRUE(std::isfinite(model->evaluate(tokens.data(), tokens.data())));
  std::vector<float> logits(options.config.vocab_size);
  model->start_generation(1, kT);
  model->prefill(tokens.data(), 4, logits.data());
  EXPECT_TRUE(std::isfinite(logits[0]));
#endif
}

TEST(CudaDataParallel, CallsOutOfOrderAreRefused) {
  GPT2_REQUIRE_NCCL();
#ifdef GPT2_WITH_NCCL
  SingleProcessCommunicator host;
  NcclCommunicator nccl(host);
  ModelOptions options = one_rank_options(nccl);
  options.overlap_communication = true;
  std::unique_ptr<Model> model = make_cuda_model(options);
  const std::vector<int> tokens = random_tokens(kT, options.config.vocab_size, 5);
  model->zero_grad();
  model->expect_last_micro_batch();
  model->forward_backward(tokens.data(), tokens.data(), 1.0f);
  EXPECT_THROW(model->grad_norm(), Error);
  EXPECT_THROW(model->adamw_step(AdamWHyper{}, 1, 1.0f), Error);
  EXPECT_THROW(model->forward_backward(tokens.data(), tokens.data(), 1.0f), Error);
  model->reduce_gradients();
  EXPECT_TRUE(std::isfinite(model->grad_norm()));
  model->adamw_step(AdamWHyper{}, 1, 1.0f);
  const std::optional<Model::CommunicationTime> timing = model->last_step_communication();
  ASSERT_TRUE(timing.has_value());
  EXPECT_GT(timing->collective_ms, 0.0);
  EXPECT_GE(timing->exposed_ms, 0.0);
#endif
}


#ifdef GPT2_WITH_NCCL
// `world` ranks as threads, rank r on GPU r through NCCL, each training B rows of every batch.
std::vector<Trained> train_ranks(int world, int B, const RunSpec& spec) {
  std::vector<Trained> ranks(static_cast<size_t>(world));
  testing::run_ranks(world, [&](int rank, Communicator& host) {
    NcclCommunicator nccl(host);  // device = rank
    ranks[static_cast<size_t>(rank)] = train(&nccl, world, rank, B, spec);
  });
  return ranks;
}
#endif

TEST(CudaDataParallel, TwoGpusGiveOneGpusWholeBatchInFp32) {
  GPT2_REQUIRE_NCCL();
#ifdef GPT2_WITH_NCCL
  GPT2_REQUIRE_TWO_GPUS();
  constexpr int kWorld = 2, kB = 2;
  RunSpec single_spec;
  single_spec.micro_batches = 2;
  GPT2_CUDA_CHECK(cudaSetDevice(0));
  const Trained single = train(nullptr, 1, 0, kWorld * kB, single_spec);
  for (const int zero : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "ZeRO-" << zero);
    RunSpec spec = single_spec;
    spec.zero_stage = zero;
    const std::vector<Trained> ranks = train_ranks(kWorld, kB, spec);
    for (int rank = 0; rank < kWorld; ++rank) {
      const Trained& got = ranks[static_cast<size_t>(rank)];
      EXPECT_EQ(got.params, ranks[0].params) << "rank " << rank << ": replicas differ";
      EXPECT_EQ(got.m, ranks[0].m) << "rank " << rank;
      EXPECT_EQ(got.norms, ranks[0].norms) << "rank " << rank;
    }
    // Each rank's losses are its own rows' mean: the two ranks' average is the whole batch's.
    for (size_t step = 0; step < single.losses.size(); ++step) {
      const double mean = (double(ranks[0].losses[step]) + ranks[1].losses[step]) / kWorld;
      EXPECT_NEAR(mean, single.losses[step], 1e-5 * single.losses[step]) << "step " << step;
      EXPECT_NEAR(ranks[0].norms[step], single.norms[step], 1e-5 * single.norms[step]);
    }
    // AdamW's first moment is linear in the gradients (the parameters are not compared: AdamW
    // divides by the RMS of gradients, some of which are as small as their rounding).
    EXPECT_LE(max_relative_difference(ranks[0].m, single.m), 1e-5);
  }
  GPT2_CUDA_CHECK(cudaSetDevice(0));
#endif
}

TEST(CudaDataParallel, TwoGpusOverlappedIsBlockingBitForBitAndBf16SumsStayClose) {
  GPT2_REQUIRE_NCCL();
#ifdef GPT2_WITH_NCCL
  GPT2_REQUIRE_TWO_GPUS();
  const auto run_two = [&](const RunSpec& spec) {
    const std::vector<Trained> ranks = train_ranks(2, 2, spec);
    EXPECT_EQ(ranks[1].params, ranks[0].params) << "replicas differ";
    return ranks[0];
  };
  RunSpec spec;
  spec.precision = Precision::kBf16;
  spec.zero_stage = 1;
  spec.micro_batches = 2;
  spec.finish_step = true;
  spec.steps = 4;
  for (const GradReduce reduce : {GradReduce::kFp32, GradReduce::kBf16}) {
    SCOPED_TRACE(::testing::Message() << "sums in " << to_string(reduce));
    spec.grad_reduce = reduce;
    spec.overlap = true;
    const Trained overlapped = run_two(spec);
    spec.overlap = false;
    const Trained blocking = run_two(spec);
    EXPECT_EQ(overlapped.losses, blocking.losses);
    EXPECT_EQ(overlapped.norms, blocking.norms);
    EXPECT_EQ(overlapped.params, blocking.params);
    EXPECT_EQ(overlapped.m, blocking.m);
    EXPECT_EQ(overlapped.v, blocking.v);
  }
  // One rounding of the two ranks' sum to bf16 (2^-9 relative) in each step's gradients: the
  // first moment, linear in them, moves by about that.
  spec.overlap = true;
  spec.grad_reduce = GradReduce::kFp32;
  const Trained fp32_sums = run_two(spec);
  spec.grad_reduce = GradReduce::kBf16;
  const Trained bf16_sums = run_two(spec);
  EXPECT_LE(max_relative_difference(bf16_sums.m, fp32_sums.m), 1e-2);
  for (size_t step = 0; step < fp32_sums.losses.size(); ++step)
    EXPECT_NEAR(bf16_sums.losses[step], fp32_sums.losses[step], 1e-3 * fp32_sums.losses[step]);
  GPT2_CUDA_CHECK(cudaSetDevice(0));
#endif
}

}  // namespace
}  // namespace gpt2
