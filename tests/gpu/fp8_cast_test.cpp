// gpu::fp8_cast_transpose (kernels/gpu/fp8_cast.cuh) against its CPU twin
// cpu::fp8_cast_transpose, bit for bit: both row orders and the amax, E4M3 and E5M2, bf16 and
// fp32 inputs, odd shapes around the 64 x 64 tiles, scales that push values past the formats'
// range (saturation) and below their smallest subnormal, NaN and infinities in the input; the
// outputs are poisoned first, so an element the kernel forgot fails, and amax accumulates into
// what it holds. The fusions (Fp8CastFusion): the GELU backward folded in gives the bits of
// gpu::gelu_backward then the plain cast, the GELU forward folded in gives the CPU cast of the
// GELU's bf16 output within one code step, and the column partials are each tile's column sums
// (against fp64, and the same bits on a second run).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/fp8.h"
#include "kernels/gpu/fp8_cast.cuh"
#include "kernels/gpu/gelu.cuh"

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

const std::pair<int64_t, int64_t> kFusionShapes[] = {{3, 5}, {65, 129}, {128, 768}, {200, 1032},
                                                     {300, 40}, {129, 2304}};

// The cast of a GELU's output gradient g with gelu' folded in, against gelu_backward then the
// plain cast: codes in both orders and the amax, bit for bit.
TEST(GpuFp8Cast, FoldsTheGeluBackwardInBitForBit) {
  GPT2_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const auto& [rows, cols] : kFusionShapes) {
    const int64_t n = rows * cols;
    DeviceBuffer<bf16> d_grad(n), d_pre(n), d_gelu_grad(n);
    upload_floats(d_grad, random_normal(n, ++seed, 0.01));
    upload_floats(d_pre, random_normal(n, ++seed, 2.0));
    DeviceBuffer<float> d_scale(1), d_amax(1), d_want_amax(1);
    d_scale.upload({4096.0f});
    d_amax.upload({0.0f});
    d_want_amax.upload({0.0f});
    DeviceBuffer<uint8_t> d_out(n), d_out_t(n), d_want(n), d_want_t(n);
    d_out.poison();
    d_out_t.poison();
    gelu_backward(d_gelu_grad.get(), d_pre.get(), d_grad.get(), n, nullptr);
    fp8_cast_transpose(d_gelu_grad.get(), rows, cols, d_scale.get(), Fp8Format::kE5M2,
                       d_want.get(), d_want_t.get(), d_want_amax.get(), nullptr);
    Fp8CastFusion<bf16> fusion;
    fusion.gelu_input = d_pre.get();
    fp8_cast_transpose(d_grad.get(), rows, cols, d_scale.get(), Fp8Format::kE5M2, d_out.get(),
                       d_out_t.get(), d_amax.get(), nullptr, fusion);
    EXPECT_EQ(d_out.download(), d_want.download()) << rows << "x" << cols;
    EXPECT_EQ(d_out_t.download(), d_want_t.download()) << rows << "x" << cols;
    EXPECT_EQ(d_amax.download()[0], d_want_amax.download()[0]) << rows << "x" << cols;
  }
}

// The cast of fc's pre-GELU values with the GELU forward folded in (gelu_forward), against the
// CPU cast of bf16(gelu(x)) with gelu in double: the fused gelu (gelu_by_exp2) is a few ulps
// off before its rounding to bf16, so a code may be one step from the CPU's (at most 1% of
// them), and then within one E4M3 step (2^-3 relative, or E4M3's smallest subnormal 2^-9) of
// the exact value; out_t is out transposed, bit for bit; the amax within bf16's rounding.
TEST(GpuFp8Cast, FoldsTheGeluForwardIn) {
  GPT2_REQUIRE_GPU();
  auto gelu = [](double x) {
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  };
  uint64_t seed = 150;
  for (const auto& [rows, cols] : kFusionShapes) {
    const int64_t n = rows * cols;
    std::vector<float> pre = round_through<bf16>(random_normal(n, ++seed, 2.0));
    if (n > 3) pre[1] = -12.0f, pre[2] = 30.0f, pre[3] = -0.0f;
    std::vector<float> want_values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want_values[i] = gelu(pre[i]);
    want_values = round_through<bf16>(want_values);
    const float scale = 16.0f;
    DeviceBuffer<bf16> d_pre(n);
    upload_floats(d_pre, pre);
    DeviceBuffer<float> d_scale(1), d_amax(1);
    d_scale.upload({scale});
    d_amax.upload({0.0f});
    DeviceBuffer<uint8_t> d_out(n), d_out_t(n);
    d_out.poison();
    d_out_t.poison();
    Fp8CastFusion<bf16> fusion;
    fusion.gelu_forward = true;
    fp8_cast_transpose(d_pre.get(), rows, cols, d_scale.get(), Fp8Format::kE4M3, d_out.get(),
                       d_out_t.get(), d_amax.get(), nullptr, fusion);
    std::vector<uint8_t> want(static_cast<size_t>(n));
    float want_amax = 0.0f;
    cpu::fp8_cast_transpose(want_values.data(), rows, cols, scale, Fp8Format::kE4M3,
                            want.data(), nullptr, &want_amax);
    const std::vector<uint8_t> got = d_out.download(), got_t = d_out_t.download();
    int64_t differing = 0, bad = 0, misplaced = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        if (got_t[c * rows + r] != got[i]) ++misplaced;
        if (got[i] == want[i]) continue;
        ++differing;
        const double exact = gelu(pre[i]) * scale;
        const double decoded = cpu::fp8_decode(got[i], Fp8Format::kE4M3);
        if (!(std::fabs(decoded - exact) <= 0x1p-3 * std::fabs(exact) + 0x1p-9) && bad++ < 5)
          ADD_FAILURE() << "code of gelu(" << pre[i] << ") decodes to " << decoded / scale
                        << ", want " << exact / scale;
      }
    }
    EXPECT_EQ(misplaced, 0) << rows << "x" << cols;
    EXPECT_LE(differing, n / 100) << rows << "x" << cols;
    EXPECT_NEAR(d_amax.download()[0], want_amax, 0x1p-8 * want_amax) << rows << "x" << cols;
  }
}

// column_partials[tile][c] = the sum of the cast tensor's column c over the tile's rows (with
// the GELU folded in or not): within fp32's rounding of 128 additions of the fp64 sum, and the
// same bits when run again.
TEST(GpuFp8Cast, ColumnPartialsAreEachTilesColumnSums) {
  GPT2_REQUIRE_GPU();
  uint64_t seed = 200;
  for (const bool gelu : {false, true}) {
    for (const auto& [rows, cols] : kFusionShapes) {
      const int64_t n = rows * cols;
      const int64_t tiles = (rows + kFp8CastTileRows - 1) / kFp8CastTileRows;
      DeviceBuffer<bf16> d_grad(n), d_pre(n), d_cast(n);
      upload_floats(d_grad, random_normal(n, ++seed, 3.0));
      upload_floats(d_pre, random_normal(n, ++seed, 2.0));
      DeviceBuffer<float> d_scale(1), d_partials(tiles * cols);
      d_scale.upload({1.0f});
      d_partials.poison();
      Fp8CastFusion<bf16> fusion;
      fusion.gelu_input = gelu ? d_pre.get() : nullptr;
      fusion.column_partials = d_partials.get();
      fp8_cast_transpose(d_grad.get(), rows, cols, d_scale.get(), Fp8Format::kE5M2, nullptr,
                         nullptr, nullptr, nullptr, fusion);
      const std::vector<float> partials = d_partials.download();
      fp8_cast_transpose(d_grad.get(), rows, cols, d_scale.get(), Fp8Format::kE5M2, nullptr,
                         nullptr, nullptr, nullptr, fusion);
      EXPECT_EQ(d_partials.download(), partials) << "a second run, " << rows << "x" << cols;
      // The tensor the cast saw: the gradient itself, or gelu_backward's output.
      if (gelu) gelu_backward(d_cast.get(), d_pre.get(), d_grad.get(), n, nullptr);
      const std::vector<float> cast = download_floats(gelu ? d_cast : d_grad);
      for (int64_t t = 0; t < tiles; ++t) {
        for (int64_t c = 0; c < cols; ++c) {
          double sum = 0.0, magnitude = 0.0;
          for (int64_t r = t * kFp8CastTileRows; r < std::min(rows, (t + 1) * kFp8CastTileRows);
               ++r) {
            sum += cast[r * cols + c];
            magnitude += std::fabs(cast[r * cols + c]);
          }
          const double got = partials[t * cols + c];
          ASSERT_LE(std::fabs(got - sum), 128 * std::ldexp(magnitude, -24) + 1e-30)
              << "tile " << t << " column " << c << ", " << rows << "x" << cols
              << (gelu ? " with the GELU" : "");
        }
      }
    }
  }
}

// A grouped cast of more tensors than one launch takes (kFp8CastJobsPerLaunch), of assorted
// shapes, an empty one and one with only its amax: each job's codes, both orders, and amax as
// the CPU twin gives them for that tensor alone.
TEST(GpuFp8Cast, GroupCastsEachTensorAsIfAlone) {
  GPT2_REQUIRE_GPU();
  constexpr int kJobs = kFp8CastJobsPerLaunch + 5;
  std::vector<std::vector<float>> values(kJobs);
  std::deque<DeviceBuffer<bf16>> d_in;  // deques: DeviceBuffer does not move
  std::deque<DeviceBuffer<uint8_t>> d_out, d_out_t;
  DeviceBuffer<float> d_scale(1), d_amax(kJobs);
  d_scale.upload({8.0f});
  d_amax.upload(std::vector<float>(kJobs, 0.0f));
  std::vector<Fp8CastJob<bf16>> jobs(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    const int64_t rows = i == 3 ? 0 : 16 + 37 * i, cols = 8 + 24 * (i % 7);
    values[i] = round_through<bf16>(random_normal(rows * cols, 300 + i, 2.0));
    d_in.emplace_back(rows * cols);
    d_out.emplace_back(rows * cols);
    d_out_t.emplace_back(rows * cols);
    upload_floats(d_in.back(), values[i]);
    d_out.back().poison();
    d_out_t.back().poison();
    jobs[i].in = d_in.back().get();
    jobs[i].rows = rows;
    jobs[i].cols = cols;
    jobs[i].scale = d_scale.get();
    const bool amax_only = i == 5;
    jobs[i].out = amax_only ? nullptr : d_out.back().get();
    jobs[i].out_t = amax_only ? nullptr : d_out_t.back().get();
    jobs[i].amax = d_amax.get() + i;
  }
  fp8_cast_transpose_group(jobs.data(), kJobs, Fp8Format::kE4M3, nullptr);
  const std::vector<float> amaxes = d_amax.download();
  for (int i = 0; i < kJobs; ++i) {
    const int64_t n = jobs[i].rows * jobs[i].cols;
    std::vector<uint8_t> want(static_cast<size_t>(n)), want_t(static_cast<size_t>(n));
    float want_amax = 0.0f;
    cpu::fp8_cast_transpose(values[i].data(), jobs[i].rows, jobs[i].cols, 8.0f, Fp8Format::kE4M3,
                            want.data(), want_t.data(), &want_amax);
    EXPECT_EQ(amaxes[i], want_amax) << "job " << i;
    if (jobs[i].out == nullptr) continue;
    EXPECT_EQ(d_out[i].download(), want) << "job " << i;
    EXPECT_EQ(d_out_t[i].download(), want_t) << "job " << i;
  }
}

// fp8_transpose against a host transpose at odd shapes around the 128 x 128 tiles, out_t
// poisoned.
TEST(GpuFp8Cast, TransposeMovesEveryCode) {
  GPT2_REQUIRE_GPU();
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},   {3, 5},     {128, 128}, {129, 257},
                                                {48, 136}, {256, 3072}, {200, 1032}};
  uint64_t seed = 400;
  for (const auto& [rows, cols] : shapes) {
    const int64_t n = rows * cols;
    Rng rng(++seed);
    std::vector<uint8_t> codes(static_cast<size_t>(n));
    for (uint8_t& code : codes) code = static_cast<uint8_t>(rng.next_u64() & 0xFF);
    DeviceBuffer<uint8_t> d_in(n), d_out_t(n);
    d_in.upload(codes);
    d_out_t.poison();
    fp8_transpose(d_in.get(), rows, cols, d_out_t.get(), nullptr);
    std::vector<uint8_t> want(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) want[c * rows + r] = codes[r * cols + c];
    EXPECT_EQ(d_out_t.download(), want) << rows << "x" << cols;
  }
}

}  // namespace
}  // namespace gpt2::gpu::test
