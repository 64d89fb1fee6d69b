// The CUDA model's context parallelism (model/cuda_context_attention.h) on two GPUs, ranks as
// threads with NCCL between them: a group of 2 sharing every sequence (each rank its two chunks
// of the positions) trains like one GPU holding the whole sequences.
// - fp32 (the portable kernels, which compute every row): the ranks' loss shares add up to one
//   GPU's losses within 1e-5, so do the gradient norms and AdamW's first moment;
// - bf16 (the Hopper kernels with query rows where they run; ZeRO-1; the one-round-trip step,
//   CUDA graphs capturing the group's collectives): within bf16's rounding of one GPU.
// Skips without NCCL or with fewer than 2 GPUs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "gpu/multi_gpu_test_util.h"
#include "model/context_parallel.h"
#include "model/cuda_model.h"
#include "model/parameters.h"
#include "model/thread_communicator.h"
#include "parallel/nccl_communicator.h"
#include "test_fixtures.h"

namespace gpt2 {
namespace {

using testing::max_relative_difference;
using testing::random_tokens;

constexpr int kT = 640;  // chunks of 128, 128, 128, 256: the last ends at T

ModelConfig small_config() { return testing::model_config(kT, 250, 256, 2, 2, 128); }

struct Trained {
  std::vector<float> losses, norms, m;
};

struct RunSpec {
  Precision precision = Precision::kFp32;
  int zero_stage = 0;
  bool finish_step = false;  // the one-round-trip step (graphs); else grad_norm + adamw_step
  int steps = 3;
};

// spec.steps steps of B sequences; comm/group: nullptr for one GPU with whole sequences.
Trained train(Communicator* comm, Communicator* group, int B, const RunSpec& spec) {
  ModelOptions options;
  options.config = small_config();
  options.batch_size = B;
  options.seq_len = kT;
  options.precision = spec.precision;
  options.comm = comm;
  options.context_comm = group;
  options.zero_stage = spec.zero_stage;
  std::unique_ptr<Model> model = make_cuda_model(options);
  const size_t n = ParameterLayout::for_config(options.config).total;
  std::vector<float> params(n);
  init_parameters(params.data(), options.config, 11);
  model->set_parameters(params.data());
  std::optional<ContextShard> shard;
  if (group != nullptr) shard = context_shard(kT, group->world_size(), group->rank());
  AdamWHyper hyper;
  hyper.lr = 1e-3f;
  hyper.weight_decay = 0.1f;
  const int V = options.config.vocab_size;
  Trained result;
  for (int step = 1; step <= spec.steps; ++step) {
    model->zero_grad();
    const std::vector<int> inputs = random_tokens(static_cast<size_t>(B) * kT, V, 100 * step);
    const std::vector<int> targets = random_tokens(inputs.size(), V, 100 * step + 1);
    std::vector<int> my_inputs = inputs, my_targets = targets;
    if (shard) {
      my_inputs.resize(static_cast<size_t>(B) * shard->local_len());
      my_targets.resize(my_inputs.size());
      shard->select(inputs.data(), my_inputs.data(), B);
      shard->select(targets.data(), my_targets.data(), B);
    }
    model->expect_last_micro_batch();
    if (spec.finish_step) {
      model->queue_forward_backward(my_inputs.data(), my_targets.data(), 1.0f);
      model->reduce_gradients();
      // The group's loss shares add up over the ranks: one micro-batch of the sequences.
      const Model::StepOutcome outcome = model->finish_step(hyper, step, 1.0f, 1);
      result.losses.push_back(outcome.loss);
      result.norms.push_back(outcome.grad_norm);
      continue;
    }
    float loss = model->forward_backward(my_inputs.data(), my_targets.data(), 1.0f);
    model->reduce_gradients();
    if (comm != nullptr) loss = static_cast<float>(sum_in_rank_order(*comm, loss));
    result.losses.push_back(loss);
    const float norm = model->grad_norm();
    result.norms.push_back(norm);
    model->adamw_step(hyper, step, norm > 1.0f ? 1.0f / norm : 1.0f);
  }
  std::vector<float> v(n);
  result.m.resize(n);
  model->get_optimizer_state(result.m.data(), v.data());  // collective (ZeRO-1)
  return result;
}

#ifdef GPT2_WITH_NCCL
// Two ranks as threads, rank r on GPU r, one context group of both.
std::vector<Trained> train_group(int B, const RunSpec& spec) {
  std::vector<Trained> ranks(2);
  testing::run_ranks(2, [&](int rank, Communicator& host) {
    NcclCommunicator nccl(host);  // device = rank
    std::unique_ptr<Communicator> group = nccl.split(0, rank);
    ranks[static_cast<size_t>(rank)] = train(&nccl, group.get(), B, spec);
  });
  return ranks;
}
#endif

void expect_group_trains_like_one_gpu(const RunSpec& spec, double tolerance) {
#ifdef GPT2_WITH_NCCL
  constexpr int kB = 2;
  GPT2_CUDA_CHECK(cudaSetDevice(0));
  const Trained single = train(nullptr, nullptr, kB, spec);
  const std::vector<Trained> ranks = train_group(kB, spec);
  GPT2_CUDA_CHECK(cudaSetDevice(0));
  for (size_t step = 0; step < single.losses.size(); ++step) {
    std::printf("[ context  ] %s step %zu loss one GPU %.7f group %.7f / %.7f, norm %.6f %.6f\n",
                to_string(spec.precision), step, single.losses[step], ranks[0].losses[step],
                ranks[1].losses[step], single.norms[step], ranks[0].norms[step]);
    EXPECT_EQ(ranks[0].losses[step], ranks[1].losses[step]) << "the ranks disagree";
    EXPECT_NEAR(ranks[0].losses[step], single.losses[step], tolerance * single.losses[step])
        << "step " << step;
    EXPECT_NEAR(ranks[0].norms[step], single.norms[step], tolerance * single.norms[step])
        << "step " << step;
  }
  EXPECT_EQ(ranks[0].m, ranks[1].m) << "the ranks' optimizer states differ";
  const double m_error = max_relative_difference(ranks[0].m, single.m);
  std::printf("[ context  ] %s AdamW m max relative difference %.3e\n",
              to_string(spec.precision), m_error);
  EXPECT_LE(m_error, 10 * tolerance);
#else
  (void)spec;
  (void)tolerance;
#endif
}

#define GPT2_REQUIRE_TWO_NCCL_GPUS() \
  do {                               \
    GPT2_REQUIRE_NCCL();             \
    GPT2_REQUIRE_TWO_GPUS();         \
  } while (0)

TEST(CudaContextParallel, TwoGpusShareSequencesLikeOneGpuInFp32) {
  GPT2_REQUIRE_TWO_NCCL_GPUS();
  expect_group_trains_like_one_gpu(RunSpec{}, 1e-5);
}

TEST(CudaContextParallel, TwoGpusShareSequencesInBf16WithGraphsAndZero1) {
  GPT2_REQUIRE_TWO_NCCL_GPUS();
  RunSpec spec;
  spec.precision = Precision::kBf16;
  spec.zero_stage = 1;
  spec.finish_step = true;
  spec.steps = 4;  // the second micro-batch of a kind is captured, the third replays it
  expect_group_trains_like_one_gpu(spec, 2e-2);
}

TEST(CudaContextParallel, ShortSequencesAreRefusedOnTheGpu) {
  GPT2_REQUIRE_TWO_NCCL_GPUS();
#ifdef GPT2_WITH_NCCL
  std::vector<std::string> messages(2);
  testing::run_ranks(2, [&](int rank, Communicator& host) {
    NcclCommunicator nccl(host);
    std::unique_ptr<Communicator> group = nccl.split(0, rank);
    ModelOptions options;
    options.config = small_config();
    options.batch_size = 1;
    options.seq_len = 300;  // 4 chunks of fewer than 128 positions
    options.comm = &nccl;
    options.context_comm = group.get();
    messages[static_cast<size_t>(rank)] =
        testing::error_message([&] { (void)make_cuda_model(options); });
  });
  EXPECT_NE(messages[0].find("--seq-len >= 512"), std::string::npos) << messages[0];
  GPT2_CUDA_CHECK(cudaSetDevice(0));
#endif
}

}  // namespace
}  // namespace gpt2
