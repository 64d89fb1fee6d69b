// Encoder (token + position embedding) on the GPU against the CPU reference: odd C, repeated
// tokens (tiny vocabularies), wpe with more rows than T; the backward's += contract,
// untouched rows left bit-identical, and bitwise determinism of the bucketed backward.
//
// Tolerances. Forward: one add, exact in fp32 on both sides; bf16 rounds it once (u_bf16).
// Backward: each gradient element is a sum of at most k = (occurrences + 1) terms (the prior
// value included); fp32 summation in any order errs by at most k u32 sum|terms| (the CPU sums
// sequentially, the GPU sums the occurrences first), so the two differ by <= 2 k u32 sum|terms|,
// where sum|terms| is the same op run on absolute values. bf16 adds one rounding of the result.
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/cpu/encoder.h"
#include "kernels/gpu/encoder.cuh"

namespace gpt2::gpu::test {
namespace {

struct EncoderShape {
  int B, T, C, V, max_T;
};
const EncoderShape kShapes[] = {
    {1, 1, 5, 3, 1}, {2, 7, 33, 4, 9}, {3, 65, 64, 50, 70}, {2, 64, 768, 11, 64}};

template <typename T_>
class GpuEncoder : public ::testing::Test {};
TYPED_TEST_SUITE(GpuEncoder, StorageTypes, StorageName);

std::string shape_tag(const char* what, const char* dtype, const EncoderShape& s) {
  return str_cat(what, " ", dtype, " B=", s.B, " T=", s.T, " C=", s.C, " V=", s.V);
}

TYPED_TEST(GpuEncoder, ForwardMatchesCpu) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  for (const EncoderShape& s : kShapes) {
    const int Vp = s.V + 3;  // padded rows exist but are never indexed
    const int64_t BT = int64_t(s.B) * s.T, BTC = BT * s.C;
    const std::vector<float> wte = round_through<T_>(random_normal(int64_t(Vp) * s.C, 101));
    const std::vector<float> wpe = round_through<T_>(random_normal(int64_t(s.max_T) * s.C, 102));
    const std::vector<int> inp = random_ints(BT, s.V, 103);
    DeviceBuffer<T_> d_wte(wte.size()), d_wpe(wpe.size()), d_out(BTC);
    DeviceBuffer<int> d_inp(BT);
    upload_floats(d_wte, wte);
    upload_floats(d_wpe, wpe);
    d_inp.upload(inp);
    d_out.poison();
    encoder_forward(d_out.get(), d_inp.get(), d_wte.get(), d_wpe.get(), s.B, s.T, s.C, nullptr);

    std::vector<float> expected(BTC);
    cpu::encoder_forward<float>(expected.data(), inp.data(), wte.data(), wpe.data(), s.B, s.T,
                                s.C);
    EXPECT_TRUE(expect_close(shape_tag("encoder_forward", Storage<T_>::kName, s),
                             download_floats(d_out), expected,
                             allowed_error(expected, 0.0, Storage<T_>::kUnitRoundoff)));
  }
}

TYPED_TEST(GpuEncoder, BackwardAccumulatesLikeCpuAndIsDeterministic) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  constexpr double u = Storage<T_>::kUnitRoundoff;
  for (const EncoderShape& s : kShapes) {
    const int Vp = s.V + 3;
    const int64_t BT = int64_t(s.B) * s.T, BTC = BT * s.C;
    const std::vector<int> inp = random_ints(BT, s.V, 201);
    const std::vector<float> dout = round_through<T_>(random_normal(BTC, 202));
    const std::vector<float> dwte_before = round_through<T_>(random_normal(int64_t(Vp) * s.C, 203));
    const std::vector<float> dwpe_before =
        round_through<T_>(random_normal(int64_t(s.max_T) * s.C, 204));
    DeviceBuffer<T_> d_dout(BTC), d_dwte(dwte_before.size()), d_dwpe(dwpe_before.size());
    DeviceBuffer<int> d_inp(BT), d_scratch(encoder_backward_scratch_ints(s.B, s.T));
    upload_floats(d_dout, dout);
    d_inp.upload(inp);

    std::vector<unsigned char> dwte_bytes[2], dwpe_bytes[2];
    for (int run = 0; run < 2; ++run) {
      upload_floats(d_dwte, dwte_before);
      upload_floats(d_dwpe, dwpe_before);
      d_scratch.poison();
      encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_inp.get(), s.B, s.T, s.C,
                       inp.data(), d_scratch.get(), nullptr);
      dwte_bytes[run] = d_dwte.download_bytes();
      dwpe_bytes[run] = d_dwpe.download_bytes();
    }
    EXPECT_TRUE(bitwise_equal("encoder_backward dwte run-to-run", dwte_bytes[0], dwte_bytes[1]));
    EXPECT_TRUE(bitwise_equal("encoder_backward dwpe run-to-run", dwpe_bytes[0], dwpe_bytes[1]));

    std::vector<float> dwte = dwte_before, dwpe = dwpe_before;
    cpu::encoder_backward<float>(dwte.data(), dwpe.data(), dout.data(), inp.data(), s.B, s.T,
                                 s.C);
    std::vector<float> dwte_mag = abs_values(dwte_before), dwpe_mag = abs_values(dwpe_before);
    const std::vector<float> dout_abs = abs_values(dout);
    cpu::encoder_backward<float>(dwte_mag.data(), dwpe_mag.data(), dout_abs.data(), inp.data(),
                                 s.B, s.T, s.C);
    std::vector<double> dwte_allowed = allowed_error(dwte, 0.0, u);
    add_allowed(dwte_allowed, dwte_mag, 2.0 * double(BT + 1) * kFp32Roundoff);
    std::vector<double> dwpe_allowed = allowed_error(dwpe, 0.0, u);
    add_allowed(dwpe_allowed, dwpe_mag, 2.0 * double(s.B + 1) * kFp32Roundoff);
    const std::vector<float> got_dwte = download_floats(d_dwte);
    const std::vector<float> got_dwpe = download_floats(d_dwpe);
    EXPECT_TRUE(expect_close(shape_tag("encoder_backward dwte", Storage<T_>::kName, s), got_dwte,
                             dwte, dwte_allowed));
    EXPECT_TRUE(expect_close(shape_tag("encoder_backward dwpe", Storage<T_>::kName, s), got_dwpe,
                             dwpe, dwpe_allowed));

    // Rows of tokens that do not occur, and wpe rows at or past T, keep their exact bits.
    const std::set<int> used(inp.begin(), inp.end());
    for (int v = 0; v < Vp; ++v) {
      if (used.count(v)) continue;
      for (int c = 0; c < s.C; ++c)
        ASSERT_EQ(got_dwte[int64_t(v) * s.C + c], dwte_before[int64_t(v) * s.C + c])
            << "token " << v << " channel " << c;
    }
    for (int64_t i = int64_t(s.T) * s.C; i < int64_t(s.max_T) * s.C; ++i)
      ASSERT_EQ(got_dwpe[i], dwpe_before[i]) << "wpe element " << i;
  }
}

TEST(GpuEncoderPreconditions, RejectsNegativeTokenIds) {
  GPT2_REQUIRE_GPU();
  const int B = 1, T = 3, C = 4;
  DeviceBuffer<float> d_dout(B * T * C), d_dwte(8 * C), d_dwpe(T * C);
  DeviceBuffer<int> d_inp(B * T), d_scratch(encoder_backward_scratch_ints(B, T));
  const int inp_host[3] = {1, -2, 0};
  EXPECT_THROW(encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_inp.get(), B, T, C,
                                inp_host, d_scratch.get(), nullptr),
               Error);
}

}  // namespace
}  // namespace gpt2::gpu::test
