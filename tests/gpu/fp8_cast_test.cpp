// gpu::fp8_cast_transpose (kernels/gpu/fp8_cast.cuh) against its CPU twin
// cpu::fp8_cast_transpose, bit for bit: both row orders and the amax, E4M3 and E5M2, bf16 and
// fp32 inputs, odd shapes around the 64 x 64 tiles, scales that push values past the formats'
// range (saturation) and below their smallest subnormal, NaN and infinities in the input; the
// outputs are poisoned first, so an element the kernel forgot fails, and amax accumulates into
// what it holds.
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/fp8.h"
#include "kernels/gpu/fp8_cast.cuh"

namespace gpt2::gpu::test {
namespace {

using cpu::Fp8Format;

template <typename T_>
void check_cast(int64_t rows, int64_t cols, float scale, Fp8Format format, uint64_t seed) {
  const int64_t n = rows * cols;
  std::vector<float> in = round_through<T_>(random_normal(n, seed, 4.0));
  if (n > 3) {
    in[1] = NAN;
    in[2] = INFINITY;
    in[3] = -1e30f;  // saturates (and, as bf16, stays finite)
  }
  in = round_through<T_>(in);
  DeviceBuffer<T_> d_in(n);
  DeviceBuffer<uint8_t> d_out(n), d_out_t(n);
  DeviceBuffer<float> d_scale(1), d_amax(1);
  upload_floats(d_in, in);
  d_scale.upload({scale});
  d_amax.upload({0.5f});  // accumulates: the result is max(0.5, the tensor's)
  d_out.poison();
  d_out_t.poison();
  fp8_cast_transpose(d_in.get(), rows, cols, d_scale.get(), format, d_out.get(), d_out_t.get(),
                     d_amax.get(), nullptr);
  std::vector<uint8_t> want(static_cast<size_t>(n)), want_t(static_cast<size_t>(n));
  float want_amax = 0.0f;
  cpu::fp8_cast_transpose(in.data(), rows, cols, scale, format, want.data(), want_t.data(),
                          &want_amax);
  EXPECT_EQ(d_out.download(), want) << rows << "x" << cols << " " << cpu::to_string(format);
  EXPECT_EQ(d_out_t.download(), want_t) << rows << "x" << cols << " " << cpu::to_string(format);
  EXPECT_EQ(d_amax.download()[0], std::max(0.5f, want_amax)) << rows << "x" << cols;
}

TEST(GpuFp8Cast, MatchesItsCpuTwinBitForBit) {
  GPT2_REQUIRE_GPU();
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {3, 5}, {64, 64}, {65, 129},
                                                {1000, 37}, {7, 1000}, {128, 768},
                                                {48, 136}, {200, 1032}};
  uint64_t seed = 1;
  for (const Fp8Format format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (const auto& [rows, cols] : shapes) {
      for (const float scale : {1.0f, 96.0f, 1.0f / 4096.0f}) {
        check_cast<float>(rows, cols, scale, format, ++seed);
        check_cast<bf16>(rows, cols, scale, format, ++seed);
      }
    }
  }
}

TEST(GpuFp8Cast, EitherOutputMayBeLeftOut) {
  GPT2_REQUIRE_GPU();
  const int64_t rows = 70, cols = 90;
  const std::vector<float> in = random_normal(rows * cols, 3);
  DeviceBuffer<float> d_in(rows * cols), d_scale(1);
  DeviceBuffer<uint8_t> d_out_t(rows * cols);
  upload_floats(d_in, in);
  d_scale.upload({2.0f});
  d_out_t.poison();
  fp8_cast_transpose(d_in.get(), rows, cols, d_scale.get(), Fp8Format::kE4M3, nullptr,
                     d_out_t.get(), nullptr, nullptr);
  std::vector<uint8_t> want_t(static_cast<size_t>(rows * cols));
  cpu::fp8_cast_transpose(in.data(), rows, cols, 2.0f, Fp8Format::kE4M3, nullptr, want_t.data(),
                          nullptr);
  EXPECT_EQ(d_out_t.download(), want_t);
}

}  // namespace
}  // namespace gpt2::gpu::test
