// Squared global norm on the GPU against the CPU reference, both storage types, sizes from one
// element to past the grid-stride limit (1024 blocks x 16384 elements), 16-byte aligned (the
// packed loads, with a ragged tail) and one element off (one at a time); an exactly
// representable case; the host wrapper; bitwise determinism.
//
// Tolerance: every term is positive, so the relative error of an fp32 sum of n terms is at most
// n u32. A GPU thread sums about N / (blocks x 256) terms, then two tree levels of depth 5 in
// fp32 and the partials in double: we allow (N / (blocks x 256) + 16) u32 relative. The CPU
// reference sums in double.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/cpu/global_norm.h"
#include "kernels/gpu/global_norm.cuh"

namespace gpt2::gpu::test {
namespace {

template <typename T_>
class GpuGlobalNorm : public ::testing::Test {};
TYPED_TEST_SUITE(GpuGlobalNorm, StorageTypes, StorageName);

TYPED_TEST(GpuGlobalNorm, MatchesCpuAndIsDeterministic) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  for (int64_t N : {int64_t(1), int64_t(1000), int64_t(1) << 20, int64_t(17000001)})
  for (int64_t offset : {0, 1}) {  // 16-byte aligned (packed loads) and not (one at a time)
    const std::vector<float> grads = round_through<T_>(random_normal(N, 3000 + N, 0.01));
    const int blocks = global_norm_num_blocks(N);
    ASSERT_GE(blocks, 1);
    ASSERT_LE(blocks, kGlobalNormMaxBlocks);
    DeviceBuffer<T_> d_grads(N, offset);
    DeviceBuffer<float> d_partials(blocks);
    DeviceBuffer<double> d_result(1);
    upload_floats(d_grads, grads);

    d_result.poison();
    global_norm_squared(d_result.get(), d_grads.get(), N, d_partials.get(), nullptr);
    const std::vector<unsigned char> first = d_result.download_bytes();
    const double device_value = d_result.download()[0];
    d_partials.poison();
    const double host_value =
        global_norm_squared_to_host(d_grads.get(), N, d_partials.get(), d_result.get(), nullptr);
    EXPECT_TRUE(bitwise_equal("global_norm run-to-run", first, d_result.download_bytes()));
    EXPECT_EQ(host_value, device_value);

    const double expected = cpu::global_norm_squared(grads.data(), N);
    const double per_thread = double(N) / (double(blocks) * 256.0);
    const double allowed = (per_thread + 16.0) * kFp32Roundoff * expected;
    std::printf("[ compare  ] global_norm %s N=%-9lld offset %lld got %.12g expected %.12g "
                "rel %.3g\n", Storage<T_>::kName, static_cast<long long>(N),
                static_cast<long long>(offset), device_value, expected,
                std::fabs(device_value - expected) / expected);
    EXPECT_NEAR(device_value, expected, allowed) << "N = " << N << ", offset " << offset;
  }
}

TYPED_TEST(GpuGlobalNorm, ExactForRepresentableSums) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  // 0.5^2 = 0.25; every partial sum of 4000 such terms is a multiple of 0.25 below 2^24 * 0.25,
  // so no rounding happens anywhere and the answer is exact.
  const int64_t N = 4000;
  DeviceBuffer<T_> d_grads(N);
  DeviceBuffer<float> d_partials(global_norm_num_blocks(N));
  DeviceBuffer<double> d_result(1);
  upload_floats(d_grads, std::vector<float>(N, 0.5f));
  EXPECT_EQ(global_norm_squared_to_host(d_grads.get(), N, d_partials.get(), d_result.get(),
                                        nullptr),
            1000.0);
}

TEST(GpuGlobalNormBlocks, DependOnlyOnN) {
  // The grid must not depend on the device (determinism across GPUs); runs without a GPU.
  EXPECT_EQ(global_norm_num_blocks(1), 1);
  EXPECT_GE(global_norm_num_blocks(int64_t(1) << 30), 1);
  EXPECT_EQ(global_norm_num_blocks(int64_t(1) << 40), kGlobalNormMaxBlocks);
  EXPECT_LE(global_norm_num_blocks(1000000), global_norm_num_blocks(100000000));
  EXPECT_THROW(global_norm_num_blocks(0), Error);
}

}  // namespace
}  // namespace gpt2::gpu::test
