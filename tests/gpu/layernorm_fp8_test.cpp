// gpu::layernorm_forward_fp8 and residual_layernorm_forward_fp8 (kernels/gpu/layernorm_fp8.cuh)
// against what they replace: the bf16 LayerNorm (layernorm.cuh, itself tested against its CPU
// twin) then gpu::fp8_cast_transpose to E4M3 (tested bit for bit against its own): the codes in
// both orders, the amax, mean, rstd and the residual sum, bit for bit, at row counts that leave
// a ragged last tile of 32 and at widths from one pack to the largest supported; outputs
// poisoned first. Unsupported widths are refused.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "gpu/gpu_test_util.h"
#include "kernels/gpu/fp8_cast.cuh"
#include "kernels/gpu/layernorm.cuh"
#include "kernels/gpu/layernorm_fp8.cuh"

namespace gpt2::gpu::test {
namespace {

struct Shape {
  int B, T, C;
};

// The orders asked for: both (the rows kernel, then fp8_transpose), the rows alone (the rows
// kernel) or the transposed alone (through a shared tile).
enum class Orders { kBoth, kRows, kTransposed };

void check_layernorm_fp8(const Shape& s, bool residual, Orders orders, uint64_t seed) {
  const bool want_rows = orders != Orders::kTransposed;
  const bool want_transposed = orders != Orders::kRows;
  const int64_t rows = static_cast<int64_t>(s.B) * s.T, n = rows * s.C;
  DeviceBuffer<bf16> d_x(n), d_addend(n), d_w(s.C), d_b(s.C);
  upload_floats(d_x, random_normal(n, seed, 2.0));
  upload_floats(d_addend, random_normal(n, seed + 1, 1.0));
  upload_floats(d_w, random_normal(s.C, seed + 2, 1.0));
  upload_floats(d_b, random_normal(s.C, seed + 3, 0.5));
  DeviceBuffer<float> d_scale(1);
  d_scale.upload({32.0f});  // pushes the largest outputs past E4M3's 448: saturation

  // What the fused op replaces: the bf16 LayerNorm, then the cast.
  DeviceBuffer<bf16> d_ln(n), d_want_residual(n);
  DeviceBuffer<float> d_want_mean(rows), d_want_rstd(rows), d_want_amax(1);
  DeviceBuffer<uint8_t> d_want(n), d_want_t(n);
  d_want_amax.upload({0.0f});
  if (residual) {
    residual_layernorm_forward(d_want_residual.get(), d_ln.get(), d_want_mean.get(),
                               d_want_rstd.get(), d_x.get(), d_addend.get(), d_w.get(),
                               d_b.get(), s.B, s.T, s.C, nullptr);
  } else {
    layernorm_forward(d_ln.get(), d_want_mean.get(), d_want_rstd.get(), d_x.get(), d_w.get(),
                      d_b.get(), s.B, s.T, s.C, nullptr);
  }
  fp8_cast_transpose(d_ln.get(), rows, s.C, d_scale.get(), cpu::Fp8Format::kE4M3, d_want.get(),
                     d_want_t.get(), d_want_amax.get(), nullptr);

  DeviceBuffer<bf16> d_residual(n);
  DeviceBuffer<float> d_mean(rows), d_rstd(rows), d_amax(1);
  DeviceBuffer<uint8_t> d_out(n), d_out_t(n);
  d_residual.poison();
  d_mean.poison();
  d_rstd.poison();
  d_out.poison();
  d_out_t.poison();
  d_amax.upload({0.0f});
  Fp8Destination out;
  out.rows = want_rows ? d_out.get() : nullptr;
  out.transposed = want_transposed ? d_out_t.get() : nullptr;
  out.scale = d_scale.get();
  out.amax = d_amax.get();
  if (residual) {
    residual_layernorm_forward_fp8(d_residual.get(), out, d_mean.get(), d_rstd.get(), d_x.get(),
                                   d_addend.get(), d_w.get(), d_b.get(), s.B, s.T, s.C, nullptr);
  } else {
    layernorm_forward_fp8(out, d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(), s.B,
                          s.T, s.C, nullptr);
  }
  const std::string tag = std::to_string(s.B) + "x" + std::to_string(s.T) + "x" +
                          std::to_string(s.C) + (residual ? " with the residual" : "") +
                          (orders == Orders::kBoth   ? ", both orders"
                           : orders == Orders::kRows ? ", rows alone"
                                                     : ", transposed alone");
  if (want_rows) {
    EXPECT_EQ(d_out.download(), d_want.download()) << tag;
  }
  if (want_transposed) {
    EXPECT_EQ(d_out_t.download(), d_want_t.download()) << tag;
  }
  EXPECT_EQ(d_amax.download(), d_want_amax.download()) << tag;
  EXPECT_EQ(d_mean.download(), d_want_mean.download()) << tag;
  EXPECT_EQ(d_rstd.download(), d_want_rstd.download()) << tag;
  if (residual) {
    EXPECT_EQ(download_floats(d_residual), download_floats(d_want_residual)) << tag;
  }
}

TEST(GpuLayerNormFp8, GivesTheBitsOfTheLayerNormThenTheCast) {
  GPT2_REQUIRE_GPU();
  const Shape shapes[] = {{1, 1, 8},   {1, 37, 64},   {3, 50, 768},  {2, 64, 768},
                          {1, 48, 1032}, {4, 16, 1280}, {1, 33, 2048}, {2, 100, 1600}};
  uint64_t seed = 1;
  for (const Shape& s : shapes) {
    for (const bool residual : {false, true})
      for (const Orders orders : {Orders::kBoth, Orders::kRows, Orders::kTransposed}) {
        check_layernorm_fp8(s, residual, orders, seed);
        seed += 4;
      }
  }
}

TEST(GpuLayerNormFp8, RefusesWidthsItDoesNotTake) {
  GPT2_REQUIRE_GPU();
  EXPECT_FALSE(layernorm_fp8_supported(12));
  EXPECT_FALSE(layernorm_fp8_supported(2056));
  EXPECT_TRUE(layernorm_fp8_supported(2048));
  DeviceBuffer<bf16> d_x(12), d_w(12), d_b(12);
  DeviceBuffer<float> d_scale(1);
  DeviceBuffer<uint8_t> d_out(12);
  Fp8Destination out;
  out.rows = d_out.get();
  out.scale = d_scale.get();
  EXPECT_THROW(layernorm_forward_fp8(out, nullptr, nullptr, d_x.get(), d_w.get(), d_b.get(), 1,
                                     1, 12, nullptr),
               Error);
}

}  // namespace
}  // namespace gpt2::gpu::test
