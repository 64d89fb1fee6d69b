// LayerNorm on the GPU against the CPU reference: odd C (including C = 1), B*T across several
// column-sum chunks; the += contracts of dinp, dweight and dbias; bitwise determinism.
//
// Tolerances (u32 = fp32 unit roundoff, u_T = that of the storage type). The CPU accumulates
// in double, the GPU in fp32, so the difference is essentially the GPU's fp32 error, bounded
// with the usual recursive-summation bound n u32 sum|terms| (doubled for slack):
//   mean: 2 (C + 2) u32 mean|x|;  rstd: 2 (C + 8) u32 rstd;
//   norm = (x - mean) rstd errs by ~ (C + 8) u32 rstd (|x| + |mean|) =: (C + 8) u32 |norm|~;
//   out:   u_T |out| + 2 (C + 8) u32 (|norm|~ |w| + |b|);
//   dinp:  u_T |dinp| + 2 (C + 16) u32 (|dinp0| + rstd (|dnorm| + mean|dnorm|
//                                         + |norm|~ mean(|dnorm| |norm|~)));
//   dweight: u_T |dw| + 2 (BT + C + 16) u32 (|dw0| + sum_bt |dout| |norm|~);
//   dbias:   u_T |db| + 2 (BT + 1) u32 (|db0| + sum_bt |dout|).
// u_T |value| is the one rounding of a bf16 output (for fp32 it is noise next to the rest).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/gpu/layernorm.cuh"
#include "kernels/gpu/residual.cuh"

namespace gpt2::gpu::test {
namespace {

struct LayerNormShape {
  int B, T, C;
};
// Packed backward (C a multiple of 8 bf16 / 4 fp32, at most 256 packs): 1 to 8 packs per lane
// (C = 64 ... 2048), chunks of 64 rows with a partial last one; scalar otherwise.
const LayerNormShape kShapes[] = {{1, 1, 1},     {1, 1, 3},       {2, 7, 77},    {2, 64, 5},
                                  {3, 65, 64},   {1, 7, 768},     {2, 130, 1024}, {2, 9, 1280},
                                  {2, 33, 1600}, {1, 70, 2048}};

template <typename T_>
class GpuLayerNorm : public ::testing::Test {};
TYPED_TEST_SUITE(GpuLayerNorm, StorageTypes, StorageName);

std::string shape_tag(const char* what, const char* dtype, const LayerNormShape& s) {
  return str_cat(what, " ", dtype, " B=", s.B, " T=", s.T, " C=", s.C);
}

struct Inputs {
  std::vector<float> x, weight, bias;
};

template <typename T_>
Inputs make_inputs(const LayerNormShape& s, uint64_t seed) {
  const int64_t BTC = int64_t(s.B) * s.T * s.C;
  return {round_through<T_>(random_normal(BTC, seed, 1.5, 0.3)),
          round_through<T_>(random_normal(s.C, seed + 1, 0.2, 1.0)),
          round_through<T_>(random_normal(s.C, seed + 2, 0.2))};
}

TYPED_TEST(GpuLayerNorm, ForwardMatchesCpu) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  constexpr double u = Storage<T_>::kUnitRoundoff;
  for (const LayerNormShape& s : kShapes) {
    const int C = s.C;
    const int64_t BT = int64_t(s.B) * s.T, BTC = BT * C;
    const Inputs in = make_inputs<T_>(s, 301);
    DeviceBuffer<T_> d_x(BTC), d_w(C), d_b(C), d_out(BTC);
    DeviceBuffer<float> d_mean(BT), d_rstd(BT);
    upload_floats(d_x, in.x);
    upload_floats(d_w, in.weight);
    upload_floats(d_b, in.bias);
    d_out.poison();
    d_mean.poison();
    d_rstd.poison();
    layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(),
                      s.B, s.T, C, nullptr);

    std::vector<float> out(BTC), mean(BT), rstd(BT);
    cpu::layernorm_forward<float>(out.data(), mean.data(), rstd.data(), in.x.data(),
                                  in.weight.data(), in.bias.data(), s.B, s.T, C);
    std::vector<double> out_allowed = allowed_error(out, 0.0, u);
    std::vector<double> mean_allowed(BT), rstd_allowed(BT);
    for (int64_t r = 0; r < BT; ++r) {
      double mean_abs = 0.0;
      for (int c = 0; c < C; ++c) mean_abs += std::fabs(in.x[r * C + c]) / C;
      mean_allowed[r] = 2.0 * (C + 2) * kFp32Roundoff * mean_abs;
      rstd_allowed[r] = 2.0 * (C + 8) * kFp32Roundoff * rstd[r];
      for (int c = 0; c < C; ++c) {
        const double norm_size = rstd[r] * (std::fabs(in.x[r * C + c]) + std::fabs(mean[r]));
        out_allowed[r * C + c] += 2.0 * (C + 8) * kFp32Roundoff *
                                  (norm_size * std::fabs(in.weight[c]) + std::fabs(in.bias[c]));
      }
    }
    EXPECT_TRUE(expect_close(shape_tag("layernorm_forward out", Storage<T_>::kName, s),
                             download_floats(d_out), out, out_allowed));
    EXPECT_TRUE(expect_close(shape_tag("layernorm_forward mean", Storage<T_>::kName, s),
                             d_mean.download(), mean, mean_allowed));
    EXPECT_TRUE(expect_close(shape_tag("layernorm_forward rstd", Storage<T_>::kName, s),
                             d_rstd.download(), rstd, rstd_allowed));

    // mean/rstd are optional outputs.
    DeviceBuffer<T_> d_out2(BTC);
    layernorm_forward(d_out2.get(), static_cast<float*>(nullptr), static_cast<float*>(nullptr),
                      d_x.get(), d_w.get(), d_b.get(), s.B, s.T, C, nullptr);
    EXPECT_TRUE(bitwise_equal("layernorm_forward without mean/rstd", d_out2.download_bytes(),
                              d_out.download_bytes()));
  }
}

// residual_layernorm_forward: the residual add and the LayerNorm in one pass (packed shapes)
// or as the two calls (the others), bit for bit the pair residual_forward + layernorm_forward,
// whose parts are checked against the CPU twins; the sum itself is each x + a rounded once.
TYPED_TEST(GpuLayerNorm, ResidualFusedForwardIsTheAddThenTheLayerNormBitForBit) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  for (const LayerNormShape& s : kShapes) {
    const int C = s.C;
    const int64_t BT = int64_t(s.B) * s.T, BTC = BT * C;
    const Inputs in = make_inputs<T_>(s, 311);
    const std::vector<float> addend = round_through<T_>(random_normal(BTC, 317, 0.7));
    DeviceBuffer<T_> d_x(BTC), d_a(BTC), d_w(C), d_b(C);
    upload_floats(d_x, in.x);
    upload_floats(d_a, addend);
    upload_floats(d_w, in.weight);
    upload_floats(d_b, in.bias);
    DeviceBuffer<T_> d_sum[2] = {DeviceBuffer<T_>(BTC), DeviceBuffer<T_>(BTC)};
    DeviceBuffer<T_> d_out[2] = {DeviceBuffer<T_>(BTC), DeviceBuffer<T_>(BTC)};
    DeviceBuffer<float> d_mean[2] = {DeviceBuffer<float>(BT), DeviceBuffer<float>(BT)};
    DeviceBuffer<float> d_rstd[2] = {DeviceBuffer<float>(BT), DeviceBuffer<float>(BT)};
    for (int k = 0; k < 2; ++k) {
      d_sum[k].poison();
      d_out[k].poison();
      d_mean[k].poison();
      d_rstd[k].poison();
    }
    residual_layernorm_forward(d_sum[0].get(), d_out[0].get(), d_mean[0].get(), d_rstd[0].get(),
                               d_x.get(), d_a.get(), d_w.get(), d_b.get(), s.B, s.T, C, nullptr);
    residual_forward(d_sum[1].get(), d_x.get(), d_a.get(), BTC, nullptr);
    layernorm_forward(d_out[1].get(), d_mean[1].get(), d_rstd[1].get(), d_sum[1].get(), d_w.get(),
                      d_b.get(), s.B, s.T, C, nullptr);
    const std::string dtype = Storage<T_>::kName;
    EXPECT_TRUE(bitwise_equal(shape_tag("fused residual", dtype.c_str(), s),
                              d_sum[0].download_bytes(), d_sum[1].download_bytes()));
    EXPECT_TRUE(bitwise_equal(shape_tag("fused layernorm out", dtype.c_str(), s),
                              d_out[0].download_bytes(), d_out[1].download_bytes()));
    EXPECT_TRUE(bitwise_equal(shape_tag("fused mean", dtype.c_str(), s),
                              d_mean[0].download_bytes(), d_mean[1].download_bytes()));
    EXPECT_TRUE(bitwise_equal(shape_tag("fused rstd", dtype.c_str(), s),
                              d_rstd[0].download_bytes(), d_rstd[1].download_bytes()));
    std::vector<float> expected_sum(BTC);
    for (int64_t i = 0; i < BTC; ++i) expected_sum[i] = in.x[i] + addend[i];
    EXPECT_EQ(download_floats(d_sum[0]), round_through<T_>(expected_sum))
        << shape_tag("sum", dtype.c_str(), s);
  }
}

TYPED_TEST(GpuLayerNorm, BackwardAccumulatesLikeCpuAndIsDeterministic) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  constexpr double u = Storage<T_>::kUnitRoundoff;
  for (const LayerNormShape& s : kShapes) {
    const int C = s.C;
    const int64_t BT = int64_t(s.B) * s.T, BTC = BT * C;
    const Inputs in = make_inputs<T_>(s, 401);
    std::vector<float> out(BTC), mean(BT), rstd(BT);
    cpu::layernorm_forward<float>(out.data(), mean.data(), rstd.data(), in.x.data(),
                                  in.weight.data(), in.bias.data(), s.B, s.T, C);
    const std::vector<float> dout = round_through<T_>(random_normal(BTC, 402));
    const std::vector<float> dinp_before = round_through<T_>(random_normal(BTC, 403));
    const std::vector<float> dw_before = round_through<T_>(random_normal(C, 404));
    const std::vector<float> db_before = round_through<T_>(random_normal(C, 405));

    // The GPU gets the CPU's mean/rstd, so both backward passes see identical inputs.
    DeviceBuffer<T_> d_x(BTC), d_w(C), d_dout(BTC), d_dinp(BTC), d_dw(C), d_db(C);
    DeviceBuffer<float> d_mean(BT), d_rstd(BT);
    DeviceBuffer<float> d_scratch(layernorm_backward_scratch_floats(s.B, s.T, C));
    upload_floats(d_x, in.x);
    upload_floats(d_w, in.weight);
    upload_floats(d_dout, dout);
    d_mean.upload(mean);
    d_rstd.upload(rstd);
    std::vector<unsigned char> bytes[2][3];
    for (int run = 0; run < 2; ++run) {
      upload_floats(d_dinp, dinp_before);
      upload_floats(d_dw, dw_before);
      upload_floats(d_db, db_before);
      d_scratch.poison();
      layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_x.get(),
                         d_w.get(), d_mean.get(), d_rstd.get(), s.B, s.T, C, d_scratch.get(),
                         nullptr);
      bytes[run][0] = d_dinp.download_bytes();
      bytes[run][1] = d_dw.download_bytes();
      bytes[run][2] = d_db.download_bytes();
    }
    EXPECT_TRUE(bitwise_equal("layernorm_backward dinp run-to-run", bytes[0][0], bytes[1][0]));
    EXPECT_TRUE(bitwise_equal("layernorm_backward dweight run-to-run", bytes[0][1], bytes[1][1]));
    EXPECT_TRUE(bitwise_equal("layernorm_backward dbias run-to-run", bytes[0][2], bytes[1][2]));

    std::vector<float> dinp = dinp_before, dw = dw_before, db = db_before;
    cpu::layernorm_backward<float>(dinp.data(), dw.data(), db.data(), dout.data(), in.x.data(),
                                   in.weight.data(), mean.data(), rstd.data(), s.B, s.T, C);

    std::vector<double> dinp_allowed = allowed_error(dinp, 0.0, u);
    std::vector<double> dw_size(C), db_size(C);
    for (int c = 0; c < C; ++c) {
      dw_size[c] = std::fabs(dw_before[c]);
      db_size[c] = std::fabs(db_before[c]);
    }
    for (int64_t r = 0; r < BT; ++r) {
      std::vector<double> norm_size(C), dnorm_abs(C);
      double mean_dnorm_abs = 0.0, mean_dnorm_norm_size = 0.0;
      for (int c = 0; c < C; ++c) {
        norm_size[c] = rstd[r] * (std::fabs(in.x[r * C + c]) + std::fabs(mean[r]));
        dnorm_abs[c] = std::fabs(dout[r * C + c] * in.weight[c]);
        mean_dnorm_abs += dnorm_abs[c] / C;
        mean_dnorm_norm_size += dnorm_abs[c] * norm_size[c] / C;
        dw_size[c] += std::fabs(dout[r * C + c]) * norm_size[c];
        db_size[c] += std::fabs(dout[r * C + c]);
      }
      for (int c = 0; c < C; ++c) {
        const double size = std::fabs(dinp_before[r * C + c]) +
                            rstd[r] * (dnorm_abs[c] + mean_dnorm_abs +
                                       norm_size[c] * mean_dnorm_norm_size);
        dinp_allowed[r * C + c] += 2.0 * (C + 16) * kFp32Roundoff * size;
      }
    }
    std::vector<double> dw_allowed = allowed_error(dw, 0.0, u);
    std::vector<double> db_allowed = allowed_error(db, 0.0, u);
    for (int c = 0; c < C; ++c) {
      dw_allowed[c] += 2.0 * double(BT + C + 16) * kFp32Roundoff * dw_size[c];
      db_allowed[c] += 2.0 * double(BT + 1) * kFp32Roundoff * db_size[c];
    }
    EXPECT_TRUE(expect_close(shape_tag("layernorm_backward dinp", Storage<T_>::kName, s),
                             download_floats(d_dinp), dinp, dinp_allowed));
    EXPECT_TRUE(expect_close(shape_tag("layernorm_backward dweight", Storage<T_>::kName, s),
                             download_floats(d_dw), dw, dw_allowed));
    EXPECT_TRUE(expect_close(shape_tag("layernorm_backward dbias", Storage<T_>::kName, s),
                             download_floats(d_db), db, db_allowed));
  }
}

}  // namespace
}  // namespace gpt2::gpu::test
