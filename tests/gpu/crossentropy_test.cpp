// Cross-entropy on the GPU against the CPU reference (which materializes probs; the GPU
// recomputes them): padded and unpadded vocabularies up to GPT-2's 50257/50304, large values
// planted in the padding columns (they must be ignored), in-place backward, bitwise
// determinism, and the NaN answer to an out-of-range target. The fused forward + backward
// (training's classifier, in place, one scalar dloss) must give the same bits as the
// forward/backward pair and match the CPU twin within the backward's tolerances.
//
// Tolerances (u32 = 2^-24). The GPU sums the V exponentials per thread (about V/512 terms,
// then a tree of depth <= 10) in fp32; all terms are positive, so the sum's relative error is
// below (V/512 + 16) u32, and expf adds a few ulps. The loss lse - x_t then errs by that much
// in absolute terms plus a few ulps of |max|, |x_t| and |loss|:
//   loss:    (V/512 + 24) u32 (1 + |max| + |x_t| + |loss|)
//   dlogits: |dloss| p (V/512 + 24 + |x - max|) u32 + (2 u_T + 4 u32) |expected| (the last
//            roundings on both sides, and bf16's output rounding);
//            the |x - max| term is the rounding of the exponent's argument. Padding: exactly 0.
// The CPU reference is double-accumulated, so these bounds are the GPU's own error.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/cpu/crossentropy.h"
#include "kernels/gpu/crossentropy.cuh"
#include "kernels/gpu/fp8_cast.cuh"

namespace gpt2::gpu::test {
namespace {

struct CrossEntropyShape {
  int B, T, V, Vp;
};
const CrossEntropyShape kShapes[] = {
    {1, 1, 3, 8}, {2, 7, 997, 1024}, {3, 5, 1000, 1000}, {2, 3, 37, 37},  // 37: scalar path
    {1, 7, 50257, 50304}};
/// The fused op's shapes: the ones above, one row of GPT-2's vocabulary, and an odd number of
/// rows (a model chunk) over an odd, padded vocabulary; and more rows than the staged kernel
/// has blocks (two an SM; one for GPT-2's fp32 rows), so that its blocks take several rows.
const CrossEntropyShape kFusedShapes[] = {
    {1, 1, 3, 8},         {2, 7, 997, 1024},     {3, 5, 1000, 1000}, {2, 3, 37, 37},
    {1, 1, 50257, 50304}, {1, 37, 50257, 50304}, {1, 37, 333, 344},  {5, 301, 333, 344},
    {2, 170, 50257, 50304}};

template <typename T_>
class GpuCrossEntropy : public ::testing::Test {};
TYPED_TEST_SUITE(GpuCrossEntropy, StorageTypes, StorageName);

std::string shape_tag(const char* what, const char* dtype, const CrossEntropyShape& s) {
  return str_cat(what, " ", dtype, " B=", s.B, " T=", s.T, " V=", s.V, " Vp=", s.Vp);
}

/// Logits ~ N(0, 2^2) in the vocabulary and 1000 in the padding (which must not count).
template <typename T_>
std::vector<float> make_logits(const CrossEntropyShape& s, uint64_t seed) {
  std::vector<float> logits = random_normal(int64_t(s.B) * s.T * s.Vp, seed, 2.0);
  for (int64_t row = 0; row < int64_t(s.B) * s.T; ++row)
    for (int v = s.V; v < s.Vp; ++v) logits[row * s.Vp + v] = 1000.0f;
  return round_through<T_>(logits);
}

double sum_slack(int V) { return double(V) / 512.0 + 24.0; }

/// The CPU reference's allowed error for dlogits (see the file comment).
template <typename T_>
std::vector<double> dlogits_allowed(const CrossEntropyShape& s, const std::vector<float>& logits,
                                    const std::vector<float>& probs,
                                    const std::vector<float>& expected,
                                    const std::vector<float>& dlosses) {
  constexpr double u = Storage<T_>::kUnitRoundoff;
  // Base: the last two roundings ((p - [v == t]) and the product with dloss) on both sides.
  std::vector<double> allowed = allowed_error(expected, 0.0, 2 * u + 4 * kFp32Roundoff);
  for (int64_t row = 0; row < int64_t(s.B) * s.T; ++row) {
    const float* x = logits.data() + row * s.Vp;
    const double max = *std::max_element(x, x + s.V);
    for (int v = 0; v < s.V; ++v) {
      const int64_t i = row * s.Vp + v;
      allowed[i] += std::fabs(dlosses[row]) * probs[i] *
                    (sum_slack(s.V) + std::fabs(x[v] - max)) * kFp32Roundoff;
    }
    for (int v = s.V; v < s.Vp; ++v) allowed[row * s.Vp + v] = 0.0;  // padding: exactly 0
  }
  return allowed;
}

TYPED_TEST(GpuCrossEntropy, ForwardMatchesCpu) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  for (const CrossEntropyShape& s : kShapes) {
    const int64_t BT = int64_t(s.B) * s.T;
    const std::vector<float> logits = make_logits<T_>(s, 701);
    const std::vector<int> targets = random_ints(BT, s.V, 702);
    DeviceBuffer<T_> d_logits(logits.size());
    DeviceBuffer<int> d_targets(BT);
    DeviceBuffer<float> d_losses(BT);
    upload_floats(d_logits, logits);
    d_targets.upload(targets);
    std::vector<unsigned char> bytes[2];
    for (int run = 0; run < 2; ++run) {
      d_losses.poison();
      crossentropy_forward(d_losses.get(), d_logits.get(), d_targets.get(), s.B, s.T, s.V, s.Vp,
                           nullptr);
      bytes[run] = d_losses.download_bytes();
    }
    EXPECT_TRUE(bitwise_equal("crossentropy_forward run-to-run", bytes[0], bytes[1]));

    std::vector<float> losses(BT), probs(logits.size());
    cpu::crossentropy_forward<float>(losses.data(), probs.data(), logits.data(), targets.data(),
                                     s.B, s.T, s.V, s.Vp);
    std::vector<double> allowed(BT);
    for (int64_t row = 0; row < BT; ++row) {
      const float* x = logits.data() + row * s.Vp;
      const double max = *std::max_element(x, x + s.V);
      allowed[row] = sum_slack(s.V) * kFp32Roundoff *
                     (1.0 + std::fabs(max) + std::fabs(x[targets[row]]) + std::fabs(losses[row]));
    }
    EXPECT_TRUE(expect_close(shape_tag("crossentropy_forward losses", Storage<T_>::kName, s),
                             d_losses.download(), losses, allowed));
  }
}

TYPED_TEST(GpuCrossEntropy, BackwardMatchesCpuInPlaceAndDeterministic) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  for (const CrossEntropyShape& s : kShapes) {
    const int64_t BT = int64_t(s.B) * s.T;
    const std::vector<float> logits = make_logits<T_>(s, 801);
    const std::vector<int> targets = random_ints(BT, s.V, 802);
    std::vector<float> dlosses = random_normal(BT, 803, 0.25, 1.0);
    for (float& d : dlosses) d /= float(BT);  // the model's 1/(B*T) scale, give or take
    DeviceBuffer<T_> d_logits(logits.size()), d_dlogits(logits.size());
    DeviceBuffer<int> d_targets(BT);
    DeviceBuffer<float> d_dlosses(BT);
    upload_floats(d_logits, logits);
    d_targets.upload(targets);
    d_dlosses.upload(dlosses);
    std::vector<unsigned char> bytes[2];
    for (int run = 0; run < 2; ++run) {
      d_dlogits.poison();
      crossentropy_backward(d_dlogits.get(), d_dlosses.get(), d_logits.get(), d_targets.get(),
                            s.B, s.T, s.V, s.Vp, nullptr);
      bytes[run] = d_dlogits.download_bytes();
    }
    EXPECT_TRUE(bitwise_equal("crossentropy_backward run-to-run", bytes[0], bytes[1]));

    std::vector<float> losses(BT), probs(logits.size()), dlogits(logits.size());
    cpu::crossentropy_forward<float>(losses.data(), probs.data(), logits.data(), targets.data(),
                                     s.B, s.T, s.V, s.Vp);
    cpu::crossentropy_backward<float>(dlogits.data(), dlosses.data(), probs.data(),
                                      targets.data(), s.B, s.T, s.V, s.Vp);
    EXPECT_TRUE(expect_close(shape_tag("crossentropy_backward dlogits", Storage<T_>::kName, s),
                             download_floats(d_dlogits), dlogits,
                             dlogits_allowed<T_>(s, logits, probs, dlogits, dlosses)));

    // In place: dlogits written over the logits gives the very same bits.
    crossentropy_backward(d_logits.get(), d_dlosses.get(), d_logits.get(), d_targets.get(), s.B,
                          s.T, s.V, s.Vp, nullptr);
    EXPECT_TRUE(bitwise_equal("crossentropy_backward in place", d_logits.download_bytes(),
                              bytes[0]));
  }
}

TYPED_TEST(GpuCrossEntropy, FusedForwardBackwardEqualsThePairAndMatchesCpu) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  for (const CrossEntropyShape& s : kFusedShapes) {
    const int64_t BT = int64_t(s.B) * s.T;
    const std::vector<float> logits = make_logits<T_>(s, 1001);
    const std::vector<int> targets = random_ints(BT, s.V, 1002);
    const float dloss = 0.7f / float(BT);  // loss_scale / (B*T), as the model passes it
    DeviceBuffer<T_> d_logits(logits.size()), d_pair_dlogits(logits.size());
    DeviceBuffer<int> d_targets(BT);
    DeviceBuffer<float> d_losses(BT), d_pair_losses(BT), d_dlosses(BT);
    d_targets.upload(targets);
    d_dlosses.upload(std::vector<float>(BT, dloss));

    // The unfused pair, out of place.
    upload_floats(d_logits, logits);
    d_pair_losses.poison();
    d_pair_dlogits.poison();
    crossentropy_forward(d_pair_losses.get(), d_logits.get(), d_targets.get(), s.B, s.T, s.V,
                         s.Vp, nullptr);
    crossentropy_backward(d_pair_dlogits.get(), d_dlosses.get(), d_logits.get(), d_targets.get(),
                          s.B, s.T, s.V, s.Vp, nullptr);

    // Fused, in place, twice from the same logits: the same bits each run and as the pair.
    std::vector<unsigned char> loss_bytes[2], dlogit_bytes[2];
    for (int run = 0; run < 2; ++run) {
      upload_floats(d_logits, logits);
      d_losses.poison();
      crossentropy_forward_backward(d_losses.get(), d_logits.get(), d_targets.get(), dloss, s.B,
                                    s.T, s.V, s.Vp, nullptr);
      loss_bytes[run] = d_losses.download_bytes();
      dlogit_bytes[run] = d_logits.download_bytes();
    }
    const std::string tag = shape_tag("fused", Storage<T_>::kName, s);
    EXPECT_TRUE(bitwise_equal(tag + " losses run-to-run", loss_bytes[0], loss_bytes[1]));
    EXPECT_TRUE(bitwise_equal(tag + " dlogits run-to-run", dlogit_bytes[0], dlogit_bytes[1]));
    EXPECT_TRUE(bitwise_equal(tag + " losses vs crossentropy_forward", loss_bytes[0],
                              d_pair_losses.download_bytes()));
    EXPECT_TRUE(bitwise_equal(tag + " dlogits vs crossentropy_backward", dlogit_bytes[0],
                              d_pair_dlogits.download_bytes()));

    // Against the CPU twin.
    std::vector<float> losses(BT), dlogits(logits.size()), probs(logits.size());
    cpu::crossentropy_forward_backward<float>(losses.data(), dlogits.data(), logits.data(),
                                              targets.data(), dloss, s.B, s.T, s.V, s.Vp);
    std::vector<float> unused_losses(BT);
    cpu::crossentropy_forward<float>(unused_losses.data(), probs.data(), logits.data(),
                                     targets.data(), s.B, s.T, s.V, s.Vp);
    std::vector<double> loss_allowed(BT);
    for (int64_t row = 0; row < BT; ++row) {
      const float* x = logits.data() + row * s.Vp;
      const double max = *std::max_element(x, x + s.V);
      loss_allowed[row] = sum_slack(s.V) * kFp32Roundoff *
                          (1.0 + std::fabs(max) + std::fabs(x[targets[row]]) +
                           std::fabs(losses[row]));
    }
    EXPECT_TRUE(expect_close(tag + " losses vs CPU", d_losses.download(), losses, loss_allowed));
    EXPECT_TRUE(expect_close(tag + " dlogits vs CPU", download_floats(d_logits), dlogits,
                             dlogits_allowed<T_>(s, logits, probs, dlogits,
                                                 std::vector<float>(BT, dloss))));
  }
}

TYPED_TEST(GpuCrossEntropy, OutOfRangeTargetGivesNaN) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  const CrossEntropyShape s{1, 3, 10, 16};
  const std::vector<float> logits = make_logits<T_>(s, 901);
  const std::vector<int> targets = {2, 10, -1};  // 10 == V is padding, not vocabulary
  DeviceBuffer<T_> d_logits(logits.size()), d_dlogits(logits.size());
  DeviceBuffer<int> d_targets(3);
  DeviceBuffer<float> d_losses(3), d_dlosses(3);
  upload_floats(d_logits, logits);
  d_targets.upload(targets);
  d_dlosses.upload({1.0f, 1.0f, 1.0f});
  crossentropy_forward(d_losses.get(), d_logits.get(), d_targets.get(), s.B, s.T, s.V, s.Vp,
                       nullptr);
  crossentropy_backward(d_dlogits.get(), d_dlosses.get(), d_logits.get(), d_targets.get(), s.B,
                        s.T, s.V, s.Vp, nullptr);
  const std::vector<float> losses = d_losses.download();
  const std::vector<float> dlogits = download_floats(d_dlogits);
  EXPECT_TRUE(std::isfinite(losses[0]));
  EXPECT_TRUE(std::isnan(losses[1]));
  EXPECT_TRUE(std::isnan(losses[2]));
  for (int v = 0; v < s.V; ++v) {
    EXPECT_TRUE(std::isfinite(dlogits[v]));
    EXPECT_TRUE(std::isnan(dlogits[s.Vp + v]));
    EXPECT_TRUE(std::isnan(dlogits[2 * s.Vp + v]));
  }
  // The fused op answers the same way.
  crossentropy_forward_backward(d_losses.get(), d_logits.get(), d_targets.get(), 1.0f, s.B, s.T,
                                s.V, s.Vp, nullptr);
  const std::vector<float> fused_losses = d_losses.download();
  const std::vector<float> fused_dlogits = download_floats(d_logits);
  EXPECT_TRUE(std::isfinite(fused_losses[0]));
  EXPECT_TRUE(std::isnan(fused_losses[1]));
  EXPECT_TRUE(std::isnan(fused_losses[2]));
  for (int v = 0; v < s.V; ++v) {
    EXPECT_TRUE(std::isfinite(fused_dlogits[v]));
    EXPECT_TRUE(std::isnan(fused_dlogits[s.Vp + v]));
    EXPECT_TRUE(std::isnan(fused_dlogits[2 * s.Vp + v]));
  }
}

// The fused op writing its gradient's E5M2 codes (--precision fp8's classifier): dlogits the
// same bits as without codes, the codes and amax those of fp8_cast_transpose of those dlogits
// (rows only), at a scale that puts the largest near E5M2's top; with codes_only, the same losses,
// codes and amax, and the logits left as they were. Shapes whose Vp is a multiple of the pack
// (the codes need it).
TYPED_TEST(GpuCrossEntropy, FusedForwardBackwardWritesTheGradientCodes) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  const CrossEntropyShape shapes[] = {{1, 1, 3, 8},       {2, 7, 997, 1024},
                                      {1, 37, 333, 344},  {1, 5, 50257, 50304},
                                      {5, 301, 333, 344}, {2, 170, 50257, 50304}};
  for (const CrossEntropyShape& s : shapes) {
    const int64_t BT = int64_t(s.B) * s.T, n = BT * s.Vp;
    const std::vector<float> logits = make_logits<T_>(s, 1101);
    const std::vector<int> targets = random_ints(BT, s.V, 1102);
    const float dloss = 0.7f / float(BT);
    DeviceBuffer<T_> d_logits(n), d_plain(n), d_kept(n);
    DeviceBuffer<int> d_targets(BT);
    DeviceBuffer<float> d_losses(BT), d_kept_losses(BT), d_scale(4), d_amax(3);
    DeviceBuffer<uint8_t> d_codes(n), d_want(n), d_codes_only(n);
    d_targets.upload(targets);
    d_scale.upload({float(BT) * 65536.0f, 0.f, 0.f, 0.f});  // the largest |dlogit| ~ 1 / BT
    d_amax.upload({0.0f, 0.0f, 0.0f});
    upload_floats(d_plain, logits);
    crossentropy_forward_backward(d_losses.get(), d_plain.get(), d_targets.get(), dloss, s.B,
                                  s.T, s.V, s.Vp, nullptr);
    upload_floats(d_logits, logits);
    d_codes.poison();
    Fp8Destination codes;
    codes.rows = d_codes.get();
    codes.format = cpu::Fp8Format::kE5M2;
    codes.scale = d_scale.get();
    codes.amax = d_amax.get();
    crossentropy_forward_backward(d_losses.get(), d_logits.get(), d_targets.get(), dloss, s.B,
                                  s.T, s.V, s.Vp, nullptr, codes);
    fp8_cast_transpose(d_plain.get(), BT, s.Vp, d_scale.get(), cpu::Fp8Format::kE5M2,
                       d_want.get(), nullptr, d_amax.get() + 1, nullptr);
    upload_floats(d_kept, logits);
    d_codes_only.poison();
    d_kept_losses.poison();
    codes.rows = d_codes_only.get();
    codes.amax = d_amax.get() + 2;
    crossentropy_forward_backward(d_kept_losses.get(), d_kept.get(), d_targets.get(), dloss, s.B,
                                  s.T, s.V, s.Vp, nullptr, codes, /*codes_only=*/true);
    const std::string tag = shape_tag("fused with codes", Storage<T_>::kName, s);
    EXPECT_TRUE(bitwise_equal(tag + " dlogits", d_logits.download_bytes(),
                              d_plain.download_bytes()));
    EXPECT_EQ(d_codes.download(), d_want.download()) << tag;
    const std::vector<float> amax = d_amax.download();
    EXPECT_EQ(amax[0], amax[1]) << tag;
    EXPECT_GT(amax[0], 0.0f) << tag;
    // codes_only: the same losses, codes and amax; the logits untouched.
    EXPECT_TRUE(bitwise_equal(tag + " codes only: losses", d_kept_losses.download_bytes(),
                              d_losses.download_bytes()));
    EXPECT_EQ(d_codes_only.download(), d_want.download()) << tag << " codes only";
    EXPECT_EQ(amax[2], amax[0]) << tag << " codes only";
    upload_floats(d_plain, logits);
    EXPECT_TRUE(bitwise_equal(tag + " codes only: logits kept", d_kept.download_bytes(),
                              d_plain.download_bytes()));
  }
}

}  // namespace
}  // namespace gpt2::gpu::test
