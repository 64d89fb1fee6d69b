// GELU and residual on the GPU against the CPU reference, both storage types, sizes that cover
// the 16-byte-pack path, its ragged tail, and (with a one-element offset) the unaligned
// fallback; in-place use; the += contract of residual_backward.
//
// Tolerances (u = unit roundoff: 2^-24 fp32, 2^-8 bf16). fp32: residual is one IEEE add on
// both sides (exact). GELU: tanhf and std::tanh are each within a few ulps, and 0.5 x (1 + t)
// turns an ulp of t into |x| ulp(1)/2, so the two differ by a small multiple of
// u32 (|gelu| + |x|); 16 u32 (...) leaves room for both sides. The backward's t comes from
// ex2.approx and a fast division (gelu_device.cuh): an absolute error of about 7 u32 in t at
// worst (2^-22 relative in the exponential, 2 ulps in the division, the subtraction's half ulp),
// inside the same allowance. bf16: the GPU rounds its fp32
// result once to bf16 (|error| <= u_bf16 |value|); we allow 2 u_bf16 |expected| plus the fp32
// term (the expected value is itself fp32, unrounded).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/residual.h"
#include "kernels/gpu/gelu.cuh"
#include "kernels/gpu/residual.cuh"

namespace gpt2::gpu::test {
namespace {

struct Layout {
  int64_t N;
  int64_t offset;  // elements before the first one: 1 makes every pointer unaligned
};
const Layout kLayouts[] = {{1, 0}, {7, 0}, {8, 0}, {1000, 0}, {4099, 0}, {4099, 1}, {33, 1}};

template <typename T_>
class GpuElementwise : public ::testing::Test {};
TYPED_TEST_SUITE(GpuElementwise, StorageTypes, StorageName);

TYPED_TEST(GpuElementwise, GeluForwardMatchesCpu) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  constexpr double u = Storage<T_>::kUnitRoundoff;
  for (const Layout& layout : kLayouts) {
    const int64_t N = layout.N;
    const std::vector<float> x = round_through<T_>(random_normal(N, 11 + N, 2.0));
    DeviceBuffer<T_> d_x(N, layout.offset), d_out(N, layout.offset);
    upload_floats(d_x, x);
    d_out.poison();
    gelu_forward(d_out.get(), d_x.get(), N, nullptr);

    std::vector<float> expected(N);
    cpu::gelu_forward<float>(expected.data(), x.data(), N);
    std::vector<double> allowed = allowed_error(expected, 0.0, 2 * u);
    add_allowed(allowed, expected, 16 * kFp32Roundoff);
    add_allowed(allowed, x, 16 * kFp32Roundoff);
    EXPECT_TRUE(expect_close(str_cat("gelu_forward ", Storage<T_>::kName, " N=", N, " offset=",
                                     layout.offset),
                             download_floats(d_out), expected, allowed));

    // In place (out == inp) gives the same values.
    gelu_forward(d_x.get(), d_x.get(), N, nullptr);
    EXPECT_TRUE(bitwise_equal("gelu_forward in place", d_x.download_bytes(),
                              d_out.download_bytes()));
  }
}

TYPED_TEST(GpuElementwise, GeluBackwardMatchesCpu) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  constexpr double u = Storage<T_>::kUnitRoundoff;
  for (const Layout& layout : kLayouts) {
    const int64_t N = layout.N;
    const std::vector<float> x = round_through<T_>(random_normal(N, 21 + N, 2.0));
    const std::vector<float> dout = round_through<T_>(random_normal(N, 31 + N));
    DeviceBuffer<T_> d_x(N, layout.offset), d_dout(N, layout.offset), d_dinp(N, layout.offset);
    upload_floats(d_x, x);
    upload_floats(d_dout, dout);
    d_dinp.poison();
    gelu_backward(d_dinp.get(), d_x.get(), d_dout.get(), N, nullptr);

    std::vector<float> expected(N);
    cpu::gelu_backward<float>(expected.data(), x.data(), dout.data(), N);
    // gelu' = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 0.134 x^2): 1 - t^2 carries an
    // absolute error of a few ulps of 1 on each side, multiplied by the second term's
    // coefficient, which is below |x| (1 + 0.134 x^2).
    std::vector<float> term_size(N);
    for (int64_t i = 0; i < N; ++i) {
      const float ax = std::fabs(x[i]);
      term_size[i] = std::fabs(dout[i]) * (1.0f + ax * (1.0f + 0.134f * ax * ax));
    }
    std::vector<double> allowed = allowed_error(expected, 0.0, 2 * u);
    add_allowed(allowed, term_size, 16 * kFp32Roundoff);
    EXPECT_TRUE(expect_close(str_cat("gelu_backward ", Storage<T_>::kName, " N=", N, " offset=",
                                     layout.offset),
                             download_floats(d_dinp), expected, allowed));

    // In place (dinp == dout), as the model uses it.
    gelu_backward(d_dout.get(), d_x.get(), d_dout.get(), N, nullptr);
    EXPECT_TRUE(bitwise_equal("gelu_backward in place", d_dout.download_bytes(),
                              d_dinp.download_bytes()));
  }
}

TYPED_TEST(GpuElementwise, ResidualForwardMatchesCpu) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  constexpr double u = Storage<T_>::kUnitRoundoff;
  for (const Layout& layout : kLayouts) {
    const int64_t N = layout.N;
    const std::vector<float> a = round_through<T_>(random_normal(N, 41 + N));
    const std::vector<float> b = round_through<T_>(random_normal(N, 51 + N));
    DeviceBuffer<T_> d_a(N, layout.offset), d_b(N, layout.offset), d_out(N, layout.offset);
    upload_floats(d_a, a);
    upload_floats(d_b, b);
    d_out.poison();
    residual_forward(d_out.get(), d_a.get(), d_b.get(), N, nullptr);

    std::vector<float> expected(N);
    cpu::residual_forward<float>(expected.data(), a.data(), b.data(), N);
    // fp32: the same single add (u32 |expected| is the rounding of an exact sum, i.e. 0 here
    // up to ties); bf16: one extra rounding.
    EXPECT_TRUE(expect_close(str_cat("residual_forward ", Storage<T_>::kName, " N=", N,
                                     " offset=", layout.offset),
                             download_floats(d_out), expected, allowed_error(expected, 0.0, u)));

    // out aliasing an input.
    residual_forward(d_a.get(), d_a.get(), d_b.get(), N, nullptr);
    EXPECT_TRUE(bitwise_equal("residual_forward in place", d_a.download_bytes(),
                              d_out.download_bytes()));
  }
}

TYPED_TEST(GpuElementwise, ResidualBackwardAccumulates) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  constexpr double u = Storage<T_>::kUnitRoundoff;
  for (const Layout& layout : kLayouts) {
    const int64_t N = layout.N;
    const std::vector<float> dout = round_through<T_>(random_normal(N, 61 + N));
    const std::vector<float> d1_before = round_through<T_>(random_normal(N, 71 + N));
    const std::vector<float> d2_before = round_through<T_>(random_normal(N, 81 + N));
    DeviceBuffer<T_> d_dout(N, layout.offset), d_d1(N, layout.offset), d_d2(N, layout.offset);
    upload_floats(d_dout, dout);
    upload_floats(d_d1, d1_before);
    upload_floats(d_d2, d2_before);
    residual_backward(d_d1.get(), d_d2.get(), d_dout.get(), N, nullptr);

    std::vector<float> expected1 = d1_before, expected2 = d2_before;
    cpu::residual_backward<float>(expected1.data(), expected2.data(), dout.data(), N);
    const std::string tag = str_cat(Storage<T_>::kName, " N=", N, " offset=", layout.offset);
    EXPECT_TRUE(expect_close("residual_backward dinp1 " + tag, download_floats(d_d1), expected1,
                             allowed_error(expected1, 0.0, u)));
    EXPECT_TRUE(expect_close("residual_backward dinp2 " + tag, download_floats(d_d2), expected2,
                             allowed_error(expected2, 0.0, u)));
  }
}

TEST(GpuElementwisePreconditions, RejectAliasedGradientsAndNegativeSizes) {
  // Checked before any CUDA call, so this runs without a GPU too.
  float buffer[4] = {};
  EXPECT_THROW(residual_backward(buffer, buffer, buffer, 4, nullptr), Error);
  EXPECT_THROW(gelu_forward(buffer, buffer, -1, nullptr), Error);
  EXPECT_NO_THROW(residual_forward(buffer, buffer, buffer, 0, nullptr));  // N = 0: nothing to do
}

}  // namespace
}  // namespace gpt2::gpu::test
