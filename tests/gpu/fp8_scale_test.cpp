// gpu::fp8_update_scales (kernels/gpu/fp8_scale.cuh) against its CPU twin cpu::Fp8Scale, bit for
// bit, and its count of saturated casts against cpu::Fp8Scale::saturates: a run of updates
// longer than the history (so old amaxes leave it), with zero, NaN and infinite amaxes among
// them (kept out), an amax so small the scale would overflow (the scale kept), histories of 16,
// 5 and 1 (current scaling), margins 0 and 1, both formats and their initial scales;
// fp8_scale_from_bound as current scaling of its bound; and the state's layout (16-byte
// aligned inverses, as cuBLASLt's scale pointers need).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/fp8.h"
#include "kernels/gpu/context.cuh"
#include "kernels/gpu/fp8_scale.cuh"

namespace gpt2::gpu::test {
namespace {

using cpu::Fp8Format;

TEST(Fp8ScaleState, InversesSitOn16ByteBoundaries) {
  static_assert(alignof(Fp8ScaleState) == 16);
  EXPECT_EQ(offsetof(Fp8ScaleState, inverse), 0u);
  EXPECT_EQ(sizeof(Fp8ScaleState) % 16, 0u);
}

TEST(GpuFp8Scale, UpdatesMatchTheCpuDelayedScaleBitForBit) {
  GPT2_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Amaxes, one row per update, one column per tensor.
  std::vector<std::vector<float>> amaxes;
  for (int u = 0; u < 2 * kFp8History + 5; ++u) {
    const float x = std::ldexp(1.0f + 0.37f * static_cast<float>(u % 7), (u % 11) - 5);
    amaxes.push_back({x, u == 3 ? 0.0f : x * 3.1f, u % 5 == 0 ? nan : x,
                      u == 7 ? inf : 1e-3f * x, u < 4 ? 1e-38f : x * 1e6f});
  }
  const int n = static_cast<int>(amaxes[0].size());
  for (const auto& [history, margin] : {std::pair{kFp8History, 0}, std::pair{kFp8History, 1},
                                        std::pair{1, 0}, std::pair{5, 0}}) {
    std::vector<cpu::Fp8Scale> want;
    std::vector<Fp8ScaleState> initial;
    for (int i = 0; i < n; ++i) {
      const Fp8Format format = i % 2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
      const float start = i % 2 ? 32768.0f : 1.0f;
      want.emplace_back(format, history, margin, true, start);
      initial.push_back(fp8_initial_state(format, start));
    }
    DeviceBuffer<Fp8ScaleState> states(n);
    states.upload(initial);
    DeviceBuffer<uint32_t> saturated(1), by_state(n);
    saturated.upload({0u});
    by_state.upload(std::vector<uint32_t>(static_cast<size_t>(n), 0u));
    uint32_t want_saturated = 0;
    std::vector<uint32_t> want_by_state(static_cast<size_t>(n), 0u);
    Context ctx;
    for (size_t u = 0; u < amaxes.size(); ++u) {
      std::vector<Fp8ScaleState> host = states.download();
      for (size_t i = 0; i < host.size(); ++i) host[i].amax = amaxes[u][i];
      states.upload(host);
      fp8_update_scales(states.get(), n, static_cast<int64_t>(u), history, margin, ctx.stream(),
                        saturated.get(), by_state.get());
      ctx.synchronize();
      host = states.download();
      for (int i = 0; i < n; ++i) {
        const float amax = amaxes[u][static_cast<size_t>(i)];
        if (want[static_cast<size_t>(i)].saturates(amax)) {
          ++want_saturated;
          ++want_by_state[static_cast<size_t>(i)];
        }
        want[static_cast<size_t>(i)].record(amax);
        const Fp8ScaleState& got = host[static_cast<size_t>(i)];
        EXPECT_EQ(got.scale, want[static_cast<size_t>(i)].scale())
            << "tensor " << i << " update " << u << " history " << history << " margin "
            << margin;
        EXPECT_EQ(got.inverse, want[static_cast<size_t>(i)].inverse()) << "tensor " << i;
        EXPECT_EQ(got.amax, 0.0f) << "the update restarts the amax";
      }
      EXPECT_EQ(saturated.download()[0], want_saturated) << "update " << u;
      EXPECT_EQ(by_state.download(), want_by_state) << "update " << u;
    }
    EXPECT_GT(want_saturated, 0u) << "the amaxes grow past their delayed scales at times";
  }
}

// fp8_scale_from_bound: one after another on one state, each as cpu::Fp8Scale with a history of
// 1 records that bound (its sign dropped); a zero, NaN or infinite bound, or one so small the
// scale would overflow, keeps the previous scale.
TEST(GpuFp8Scale, ScaleFromABoundIsCurrentScalingOfThatBound) {
  GPT2_REQUIRE_GPU();
  Context ctx;
  DeviceBuffer<Fp8ScaleState> state(1);
  state.upload({fp8_initial_state(Fp8Format::kE5M2, 1.0f)});
  cpu::Fp8Scale want(Fp8Format::kE5M2, 1);
  const float bounds[] = {1.0f / 64,  -1.0f / 16384, 0.0f, NAN, INFINITY, 3.0f, 1e-38f,
                          0.7f / 1000};
  for (const float bound : bounds) {
    fp8_scale_from_bound(state.get(), bound, ctx.stream());
    ctx.synchronize();
    want.record(std::fabs(bound));
    const Fp8ScaleState got = state.download()[0];
    EXPECT_EQ(got.scale, want.scale()) << "bound " << bound;
    EXPECT_EQ(got.inverse, want.inverse()) << "bound " << bound;
    EXPECT_EQ(got.amax, 0.0f);
  }
}

}  // namespace
}  // namespace gpt2::gpu::test
