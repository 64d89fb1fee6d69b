// The step scalars on the GPU (kernels/gpu/step_scalars.cuh) against their CPU twin, the host
// arithmetic of Model::finish_step: the mean loss to within the rounding of a double sum (and
// bitwise the same run to run), accumulated over micro-batches; the clipping decision bit for
// bit for norms below, at and above the clip, clipping off, and non-finite losses and norms.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/gpu/step_scalars.cuh"

namespace gpt2::gpu::test {
namespace {

StepScalars download_scalars(const DeviceBuffer<StepScalars>& d) { return d.download()[0]; }

TEST(GpuStepScalars, MeanLossMatchesHostSumAndAccumulates) {
  GPT2_REQUIRE_GPU();
  DeviceBuffer<StepScalars> d_scalars(1);
  d_scalars.upload({StepScalars{}});
  double expected_sum = 0.0;
  for (int64_t n : {int64_t(1), int64_t(37), int64_t(1024), int64_t(16385), int64_t(262144)}) {
    std::vector<float> losses = random_normal(n, 500 + n, 2.0);
    for (float& x : losses) x = std::fabs(x) + 1.0f;  // losses are positive
    DeviceBuffer<float> d_losses(n);
    d_losses.upload(losses);
    mean_loss_accumulate(d_scalars.get(), d_losses.get(), n, nullptr);
    const StepScalars first = download_scalars(d_scalars);
    double host = 0.0;
    for (float x : losses) host += x;
    const float expected_mean = static_cast<float>(host / static_cast<double>(n));
    // The double sums differ only in their order, far below a float ulp of the mean: at most
    // a rounding boundary apart, one ulp.
    const float ulp = std::nextafter(expected_mean, 1e9f) - expected_mean;
    EXPECT_NEAR(first.last_mean_loss, expected_mean, ulp) << "n = " << n;
    expected_sum += static_cast<double>(first.last_mean_loss);
    EXPECT_EQ(first.loss_sum, expected_sum) << "n = " << n;
    // Run to run: the same mean (the sum goes on accumulating).
    mean_loss_accumulate(d_scalars.get(), d_losses.get(), n, nullptr);
    const StepScalars again = download_scalars(d_scalars);
    EXPECT_EQ(std::memcmp(&again.last_mean_loss, &first.last_mean_loss, sizeof(float)), 0);
    expected_sum += static_cast<double>(again.last_mean_loss);
    EXPECT_EQ(again.loss_sum, expected_sum);
  }
}

// Data parallel: every rank's (loss_sum, norm_squared) summed in rank order as the host's
// sum_in_rank_order adds them (0, then rank 0, rank 1, ...): the same bits; the norm only when
// asked (ZeRO-1).
TEST(GpuStepScalars, RankSumsAreTheHostsRankOrderSums) {
  GPT2_REQUIRE_GPU();
  for (const int world : {1, 2, 3, 8}) {
    std::vector<double> gathered(2 * static_cast<size_t>(world));
    for (size_t i = 0; i < gathered.size(); ++i)
      gathered[i] = (i % 2 ? 1e-17 : 1.0) * (0.1 + static_cast<double>(i)) + 1e16 * (i == 2);
    double loss_sum = 0.0, norm_squared = 0.0;
    for (int r = 0; r < world; ++r) {
      loss_sum += gathered[2 * r];
      norm_squared += gathered[2 * r + 1];
    }
    for (const bool sum_norm : {false, true}) {
      DeviceBuffer<StepScalars> d_scalars(1);
      StepScalars in;
      in.loss_sum = -1.0;
      in.norm_squared = 42.0;
      d_scalars.upload({in});
      DeviceBuffer<double> d_gathered(gathered.size());
      d_gathered.upload(gathered);
      sum_rank_scalars(d_scalars.get(), d_gathered.get(), world, sum_norm, nullptr);
      const StepScalars out = download_scalars(d_scalars);
      EXPECT_EQ(out.loss_sum, loss_sum) << "world " << world;
      EXPECT_EQ(out.norm_squared, sum_norm ? norm_squared : 42.0) << "world " << world;
    }
  }
}

TEST(GpuStepScalars, ClipDecisionIsTheHostRuleBitForBit) {
  GPT2_REQUIRE_GPU();
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    double loss_sum, norm_squared;
    int micro_batches;
    float clip;
  };
  const std::vector<Case> cases = {
      {7.5, 0.25, 2, 1.0f},     // norm 0.5 below the clip
      {7.5, 1.0, 2, 1.0f},      // at the clip: no scaling
      {7.5, 9.61, 3, 1.0f},     // 3.1: scaled
      {7.5, 12345.678, 1, 0.3f}, // far above
      {7.5, 12345.678, 1, 0.0f}, // clipping off
      {inf, 1.0, 1, 1.0f},      // non-finite loss
      {nan, 1.0, 4, 1.0f},
      {2.0, inf, 1, 1.0f},      // non-finite norm
      {2.0, nan, 1, 1.0f},
      {1e300, 1.0, 1, 1.0f},    // finite double, but not as a float loss
  };
  for (const Case& c : cases) {
    DeviceBuffer<StepScalars> d_scalars(1);
    StepScalars in;
    in.loss_sum = c.loss_sum;
    in.norm_squared = c.norm_squared;
    in.control.skip = 7;  // overwritten
    d_scalars.upload({in});
    clip_decision(d_scalars.get(), c.micro_batches, c.clip, nullptr);
    const StepScalars out = download_scalars(d_scalars);
    // The host rule (model.cpp, Model::finish_step_on_host).
    const float norm = static_cast<float>(std::sqrt(c.norm_squared));
    const float loss = static_cast<float>(c.loss_sum / c.micro_batches);
    const bool applied = std::isfinite(loss) && std::isfinite(norm);
    const float scale = (c.clip > 0.0f && norm > c.clip) ? c.clip / norm : 1.0f;
    SCOPED_TRACE(testing::Message() << "loss_sum " << c.loss_sum << " norm^2 " << c.norm_squared
                                    << " clip " << c.clip);
    EXPECT_EQ(std::memcmp(&out.grad_norm, &norm, sizeof(float)), 0) << out.grad_norm;
    EXPECT_EQ(out.control.skip == 0, applied);
    if (applied) {
      EXPECT_EQ(std::memcmp(&out.control.grad_scale, &scale, sizeof(float)), 0)
          << out.control.grad_scale << " vs " << scale;
    }
  }
}

}  // namespace
}  // namespace gpt2::gpu::test
