// Dense layer on the GPU (cuBLASLt path and cublasGemmEx fallback) against the CPU reference:
// shapes with odd C and OC, without bias, with an aligned bias and with a misaligned one;
// backward's = / += contracts, the nullptr skips, and bitwise determinism.
//
// Tolerances. A dot product of k terms summed in fp32 in any order errs by at most
// k u32 sum|terms| (u32 = 2^-24); the CPU's sum is within that too (or better: double), so we
// allow 2 k u32 sum|terms|, with sum|terms| computed by the CPU op on absolute values. This is
// also what keeps fp32 honest about TF32: TF32 rounds inputs to 10-bit mantissas (errors
// ~2^-11 per input), which breaks the bound by orders of magnitude at C = 64.
// bf16 outputs are rounded once (Lt epilogue) or twice (fallback: GEMM result, then + bias):
// we allow u_bf16 (2 |expected| + |bias|). dweight (beta = 1) is TWO roundings with bf16
// output: cuBLAS (Lt and GemmEx alike, seen on H200 with CUDA 13.0) rounds the product to bf16
// before adding beta * old, i.e. round(round(S) + old); we allow u_bf16 (|expected| + |old| +
// sum|terms|), where the last two bound |S|.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/matmul.h"
#include "kernels/gpu/matmul.cuh"

namespace gpt2::gpu::test {
namespace {

struct MatmulShape {
  int B, T, C, OC;
};
const MatmulShape kShapes[] = {
    {1, 1, 5, 3}, {2, 7, 64, 96}, {3, 65, 77, 131}, {2, 65, 256, 384}};

template <typename T_>
class GpuMatmul : public ::testing::Test {};
TYPED_TEST_SUITE(GpuMatmul, StorageTypes, StorageName);

std::string shape_tag(const char* what, const char* dtype, const MatmulShape& s, bool lt) {
  return str_cat(what, " ", dtype, lt ? " lt" : " gemmex", " B=", s.B, " T=", s.T, " C=", s.C,
                 " OC=", s.OC);
}

// Bias: none, 16-byte aligned (fused into cuBLASLt's epilogue), or one element off (cuBLASLt
// without bias, then the bias kernel).
enum class BiasMode { kNone, kAligned, kMisaligned };

const char* to_string(BiasMode mode) {
  switch (mode) {
    case BiasMode::kNone: return "";
    case BiasMode::kAligned: return " bias";
    case BiasMode::kMisaligned: return " bias+1";
  }
  return "?";
}

TYPED_TEST(GpuMatmul, ForwardMatchesCpu) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  constexpr double u = Storage<T_>::kUnitRoundoff;
  Context ctx;
  for (const MatmulShape& s : kShapes) {
    for (bool lt : {true, false}) {
      for (BiasMode mode : {BiasMode::kNone, BiasMode::kAligned, BiasMode::kMisaligned}) {
        ctx.set_use_cublaslt(lt);
        const bool with_bias = mode != BiasMode::kNone;
        const int64_t BT = int64_t(s.B) * s.T;
        const std::vector<float> inp = round_through<T_>(random_normal(BT * s.C, 501));
        const std::vector<float> weight =
            round_through<T_>(random_normal(int64_t(s.OC) * s.C, 502, 0.5));
        const std::vector<float> bias = round_through<T_>(random_normal(s.OC, 503));
        DeviceBuffer<T_> d_inp(inp.size()), d_w(weight.size()), d_out(BT * s.OC);
        DeviceBuffer<T_> d_bias(s.OC, mode == BiasMode::kMisaligned ? 1 : 0);
        upload_floats(d_inp, inp);
        upload_floats(d_w, weight);
        upload_floats(d_bias, bias);
        d_out.poison();
        matmul_forward(d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_bias.get() : nullptr,
                       s.B, s.T, s.C, s.OC, ctx);

        std::vector<float> out(BT * s.OC), out_size(BT * s.OC);
        cpu::matmul_forward<float>(out.data(), inp.data(), weight.data(),
                                   with_bias ? bias.data() : nullptr, s.B, s.T, s.C, s.OC);
        const std::vector<float> inp_abs = abs_values(inp), weight_abs = abs_values(weight),
                                 bias_abs = abs_values(bias);
        cpu::matmul_forward<float>(out_size.data(), inp_abs.data(), weight_abs.data(),
                                   with_bias ? bias_abs.data() : nullptr, s.B, s.T, s.C, s.OC);
        std::vector<double> allowed = allowed_error(out, 0.0, 2 * u);
        if (with_bias)
          for (int64_t i = 0; i < BT * s.OC; ++i) allowed[i] += u * bias_abs[i % s.OC];
        add_allowed(allowed, out_size, 2.0 * (s.C + 1) * kFp32Roundoff);
        EXPECT_TRUE(expect_close(
            str_cat("matmul_forward ", Storage<T_>::kName, lt ? " lt" : " gemmex",
                    to_string(mode), " B=", s.B, " T=", s.T, " C=", s.C, " OC=", s.OC),
            download_floats(d_out), out, allowed));
      }
    }
  }
}

// The fused fc forward (cuBLASLt GELU_AUX_BIAS, or GEMM + gelu_forward on the fallback) against
// cpu::matmul_forward then cpu::gelu_forward (tanh form). pre_gelu: the forward's tolerance.
// (two bf16 roundings with a bias on the fallback path). out_gelu: that error carried through GELU (|gelu'| <= 1.13), the GELU's own roundings
// (16 u32 (|gelu| + |x|), as in elementwise_test), the output rounding, and (fused bf16) GELU
// taken of the fp32 result instead of the rounded one (1.13 u |x|). In fp32 this is ~1e-6
// relative: an erf-form GELU (up to ~1e-3 away from the tanh form) would fail it.
TYPED_TEST(GpuMatmul, ForwardGeluMatchesCpu) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  constexpr double u = Storage<T_>::kUnitRoundoff;
  Context ctx;
  for (const MatmulShape& s : kShapes) {
    for (bool lt : {true, false}) {
      for (bool with_bias : {true, false}) {
        ctx.set_use_cublaslt(lt);
        const int64_t BT = int64_t(s.B) * s.T;
        const std::vector<float> inp = round_through<T_>(random_normal(BT * s.C, 511));
        const std::vector<float> weight =
            round_through<T_>(random_normal(int64_t(s.OC) * s.C, 512, 0.5));
        const std::vector<float> bias = round_through<T_>(random_normal(s.OC, 513));
        DeviceBuffer<T_> d_inp(inp.size()), d_w(weight.size()), d_bias(s.OC);
        DeviceBuffer<T_> d_pre(BT * s.OC), d_out(BT * s.OC);
        upload_floats(d_inp, inp);
        upload_floats(d_w, weight);
        upload_floats(d_bias, bias);
        d_pre.poison();
        d_out.poison();
        matmul_forward_gelu(d_out.get(), d_pre.get(), d_inp.get(), d_w.get(),
                            with_bias ? d_bias.get() : nullptr, s.B, s.T, s.C, s.OC, ctx);

        std::vector<float> pre(BT * s.OC), pre_size(BT * s.OC), out(BT * s.OC);
        cpu::matmul_forward<float>(pre.data(), inp.data(), weight.data(),
                                   with_bias ? bias.data() : nullptr, s.B, s.T, s.C, s.OC);
        cpu::gelu_forward<float>(out.data(), pre.data(), BT * s.OC);
        const std::vector<float> inp_abs = abs_values(inp), weight_abs = abs_values(weight),
                                 bias_abs = abs_values(bias);
        cpu::matmul_forward<float>(pre_size.data(), inp_abs.data(), weight_abs.data(),
                                   with_bias ? bias_abs.data() : nullptr, s.B, s.T, s.C, s.OC);
        std::vector<double> pre_allowed = allowed_error(pre, 0.0, 2 * u);
        if (with_bias)  // the fallback rounds the GEMM result, then adds the bias: two roundings
          for (int64_t i = 0; i < BT * s.OC; ++i) pre_allowed[i] += u * bias_abs[i % s.OC];
        add_allowed(pre_allowed, pre_size, 2.0 * (s.C + 1) * kFp32Roundoff);
        std::vector<double> out_allowed = allowed_error(out, 0.0, 2 * u + 16 * kFp32Roundoff);
        for (size_t i = 0; i < out_allowed.size(); ++i)
          out_allowed[i] += 1.13 * pre_allowed[i] + (1.13 * u + 16 * kFp32Roundoff) * std::fabs(pre[i]);
        const std::string tag = str_cat(Storage<T_>::kName, lt ? " lt" : " gemmex",
                                        with_bias ? " bias" : "", " B=", s.B, " T=", s.T,
                                        " C=", s.C, " OC=", s.OC);
        EXPECT_TRUE(expect_close("matmul_forward_gelu pre " + tag, download_floats(d_pre), pre,
                                 pre_allowed));
        EXPECT_TRUE(expect_close("matmul_forward_gelu out " + tag, download_floats(d_out), out,
                                 out_allowed));
      }
    }
  }
}

TYPED_TEST(GpuMatmul, BackwardMatchesCpuAndIsDeterministic) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  constexpr double u = Storage<T_>::kUnitRoundoff;
  Context ctx;
  for (const MatmulShape& s : kShapes) {
    for (bool lt : {true, false}) {
      ctx.set_use_cublaslt(lt);
      const int64_t BT = int64_t(s.B) * s.T;
      const std::vector<float> inp = round_through<T_>(random_normal(BT * s.C, 601));
      const std::vector<float> weight =
          round_through<T_>(random_normal(int64_t(s.OC) * s.C, 602, 0.5));
      const std::vector<float> dout = round_through<T_>(random_normal(BT * s.OC, 603));
      const std::vector<float> dw_before =
          round_through<T_>(random_normal(int64_t(s.OC) * s.C, 604));
      const std::vector<float> db_before = round_through<T_>(random_normal(s.OC, 605));
      DeviceBuffer<T_> d_inp(inp.size()), d_w(weight.size()), d_dout(dout.size());
      DeviceBuffer<T_> d_dinp(inp.size()), d_dw(weight.size()), d_db(s.OC);
      DeviceBuffer<float> d_scratch(matmul_backward_scratch_floats(s.B, s.T, s.OC));
      upload_floats(d_inp, inp);
      upload_floats(d_w, weight);
      upload_floats(d_dout, dout);

      std::vector<unsigned char> bytes[2][3];
      for (int run = 0; run < 2; ++run) {
        d_dinp.poison();
        upload_floats(d_dw, dw_before);
        upload_floats(d_db, db_before);
        d_scratch.poison();
        matmul_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                        d_w.get(), s.B, s.T, s.C, s.OC, d_scratch.get(), ctx);
        bytes[run][0] = d_dinp.download_bytes();
        bytes[run][1] = d_dw.download_bytes();
        bytes[run][2] = d_db.download_bytes();
      }
      EXPECT_TRUE(bitwise_equal("matmul_backward dinp run-to-run", bytes[0][0], bytes[1][0]));
      EXPECT_TRUE(bitwise_equal("matmul_backward dweight run-to-run", bytes[0][1], bytes[1][1]));
      EXPECT_TRUE(bitwise_equal("matmul_backward dbias run-to-run", bytes[0][2], bytes[1][2]));

      std::vector<float> dinp(inp.size()), dw = dw_before, db = db_before;
      cpu::matmul_backward<float>(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(),
                                  weight.data(), s.B, s.T, s.C, s.OC);
      const std::vector<float> inp_abs = abs_values(inp), weight_abs = abs_values(weight),
                               dout_abs = abs_values(dout);
      std::vector<float> dinp_size(inp.size()), dw_size = abs_values(dw_before),
                                                db_size = abs_values(db_before);
      cpu::matmul_backward<float>(dinp_size.data(), dw_size.data(), db_size.data(),
                                  dout_abs.data(), inp_abs.data(), weight_abs.data(), s.B, s.T,
                                  s.C, s.OC);
      std::vector<double> dinp_allowed = allowed_error(dinp, 0.0, u);
      add_allowed(dinp_allowed, dinp_size, 2.0 * (s.OC + 1) * kFp32Roundoff);
      std::vector<double> dw_allowed = allowed_error(dw, 0.0, u);
      add_allowed(dw_allowed, dw_size, 2.0 * double(BT + 1) * kFp32Roundoff +
                                           (std::is_same_v<T_, bf16> ? u : 0.0));
      std::vector<double> db_allowed = allowed_error(db, 0.0, u);
      add_allowed(db_allowed, db_size, 2.0 * double(BT + 1) * kFp32Roundoff);
      const char* dtype = Storage<T_>::kName;
      const std::vector<float> got_dinp = download_floats(d_dinp);
      const std::vector<float> got_dw = download_floats(d_dw);
      const std::vector<float> got_db = download_floats(d_db);
      EXPECT_TRUE(expect_close(shape_tag("matmul_backward dinp", dtype, s, lt), got_dinp,
                               dinp, dinp_allowed));
      EXPECT_TRUE(expect_close(shape_tag("matmul_backward dweight", dtype, s, lt), got_dw,
                               dw, dw_allowed));
      EXPECT_TRUE(expect_close(shape_tag("matmul_backward dbias", dtype, s, lt), got_db,
                               db, db_allowed));

      // dinp and dbias are optional: the weight gradient alone must come out the same.
      upload_floats(d_dw, dw_before);
      matmul_backward(static_cast<T_*>(nullptr), d_dw.get(), static_cast<T_*>(nullptr),
                      d_dout.get(), d_inp.get(), d_w.get(), s.B, s.T, s.C, s.OC,
                      static_cast<float*>(nullptr), ctx);
      EXPECT_TRUE(bitwise_equal("matmul_backward dweight without dinp/dbias",
                                d_dw.download_bytes(), bytes[0][1]));
    }
  }
}

// The fcproj backward with GELU's backward folded in (cuBLASLt DGELU epilogue, or the dinp GEMM
// then gelu_backward on the fallback) against cpu::matmul_backward then cpu::gelu_backward.
// dpre_gelu: the dinp error carried through gelu' (|gelu'| <= 1.13), gelu' itself computed
// another way (64 u32 relative), and the roundings: one (fused) or two (fallback) of u. In fp32
// an erf-form GELU derivative (~1e-3 away from the tanh form's) would fail it. dweight and
// dbias must be those of matmul_backward with inp = the GELU's output, to the bit.
TYPED_TEST(GpuMatmul, BackwardGeluMatchesCpu) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  constexpr double u = Storage<T_>::kUnitRoundoff;
  Context ctx;
  for (const MatmulShape& s : kShapes) {
    for (bool lt : {true, false}) {
      ctx.set_use_cublaslt(lt);
      const int64_t BT = int64_t(s.B) * s.T;
      const std::vector<float> pre = round_through<T_>(random_normal(BT * s.C, 701, 1.5));
      std::vector<float> gelu_out(pre.size());
      cpu::gelu_forward<float>(gelu_out.data(), pre.data(), BT * s.C);
      gelu_out = round_through<T_>(gelu_out);
      const std::vector<float> weight =
          round_through<T_>(random_normal(int64_t(s.OC) * s.C, 702, 0.5));
      const std::vector<float> dout = round_through<T_>(random_normal(BT * s.OC, 703));
      DeviceBuffer<T_> d_pre(pre.size()), d_gelu(pre.size()), d_w(weight.size());
      DeviceBuffer<T_> d_dout(dout.size()), d_dpre(pre.size());
      DeviceBuffer<T_> d_dw(weight.size()), d_db(s.OC), d_dw_plain(weight.size()),
          d_db_plain(s.OC), d_dinp_plain(pre.size());
      DeviceBuffer<float> d_scratch(matmul_backward_scratch_floats(s.B, s.T, s.OC));
      upload_floats(d_pre, pre);
      upload_floats(d_gelu, gelu_out);
      upload_floats(d_w, weight);
      upload_floats(d_dout, dout);
      const std::vector<float> zeros_w(weight.size(), 0.0f), zeros_b(s.OC, 0.0f);
      for (DeviceBuffer<T_>* b : {&d_dw, &d_dw_plain}) upload_floats(*b, zeros_w);
      for (DeviceBuffer<T_>* b : {&d_db, &d_db_plain}) upload_floats(*b, zeros_b);
      d_dpre.poison();
      matmul_backward_gelu(d_dpre.get(), d_dw.get(), d_db.get(), d_dout.get(), d_gelu.get(),
                           d_pre.get(), d_w.get(), s.B, s.T, s.C, s.OC, d_scratch.get(), ctx);
      matmul_backward(d_dinp_plain.get(), d_dw_plain.get(), d_db_plain.get(), d_dout.get(),
                      d_gelu.get(), d_w.get(), s.B, s.T, s.C, s.OC, d_scratch.get(), ctx);
      EXPECT_TRUE(bitwise_equal("matmul_backward_gelu dweight vs matmul_backward",
                                d_dw.download_bytes(), d_dw_plain.download_bytes()));
      EXPECT_TRUE(bitwise_equal("matmul_backward_gelu dbias vs matmul_backward",
                                d_db.download_bytes(), d_db_plain.download_bytes()));

      std::vector<float> dinp(pre.size()), dw(weight.size(), 0.0f), db(s.OC, 0.0f);
      cpu::matmul_backward<float>(dinp.data(), dw.data(), db.data(), dout.data(),
                                  gelu_out.data(), weight.data(), s.B, s.T, s.C, s.OC);
      std::vector<float> dpre(pre.size());
      cpu::gelu_backward<float>(dpre.data(), pre.data(), dinp.data(), BT * s.C);
      const std::vector<float> gelu_abs = abs_values(gelu_out), weight_abs = abs_values(weight),
                               dout_abs = abs_values(dout);
      std::vector<float> dinp_size(pre.size()), dw_size(weight.size(), 0.0f), db_size(s.OC, 0.0f);
      cpu::matmul_backward<float>(dinp_size.data(), dw_size.data(), db_size.data(),
                                  dout_abs.data(), gelu_abs.data(), weight_abs.data(), s.B, s.T,
                                  s.C, s.OC);
      std::vector<double> allowed(pre.size());
      for (size_t i = 0; i < allowed.size(); ++i) {
        const double dinp_error = u * std::fabs(dinp[i]) +
                                  2.0 * (s.OC + 1) * kFp32Roundoff * dinp_size[i];
        allowed[i] = 1.13 * dinp_error +
                     (u + 64 * kFp32Roundoff) * (std::fabs(dpre[i]) + 1.13 * std::fabs(dinp[i]));
      }
      EXPECT_TRUE(expect_close(shape_tag("matmul_backward_gelu dpre_gelu", Storage<T_>::kName,
                                         s, lt),
                               download_floats(d_dpre), dpre, allowed));
    }
  }
}

TEST(GpuMatmulPreconditions, DbiasNeedsScratch) {
  GPT2_REQUIRE_GPU();
  Context ctx;
  DeviceBuffer<float> d_a(16), d_b(16), d_c(16);
  EXPECT_THROW(matmul_backward(d_a.get(), d_b.get(), d_c.get(), d_a.get(), d_b.get(), d_c.get(),
                               1, 2, 2, 2, static_cast<float*>(nullptr), ctx),
               Error);
}

}  // namespace
}  // namespace gpt2::gpu::test
