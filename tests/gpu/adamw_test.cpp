// AdamW on the GPU against the CPU reference over several steps: fp32 parameters updated in
// place, and bf16 parameters with fp32 master weights (the master must track the CPU's fp32
// parameters; the bf16 copy must be exactly the master rounded to nearest even).
//
// Tolerances (u32 = 2^-24). Each step computes m, v, m_hat / (sqrt(v_hat) + eps) with a handful
// of fp32 roundings on both sides (and the bias corrections may differ by an ulp between the
// host's double and the CPU reference's float), so per step the two differ by a few u32
// relative in m and v and by a few u32 (|p| + lr |update|) in p; |update| is at most about
// (1 - beta1) / sqrt(1 - beta2) + weight_decay |p| < 1 + |p| for these hyper-parameters. The
// differences compound at most linearly over the steps: we allow 32 t u32 (|value| + lr).
// m = beta1 m + (1 - beta1) g can cancel to ~0 while its terms are not small, and the GPU
// contracts it into an FMA (the CPU does not), so m is held to 32 t u32 times the same
// recursion run on |g| (m_size below), which bounds the terms' magnitudes at every step.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/cpu/adamw.h"
#include "kernels/gpu/adamw.cuh"

namespace gpt2::gpu::test {
namespace {

constexpr int kSteps = 5;
constexpr int64_t kSizes[] = {1, 1003, 70001};

AdamWHyper test_hyper() {
  AdamWHyper hyper;
  hyper.lr = 1e-2f;
  hyper.beta1 = 0.9f;
  hyper.beta2 = 0.95f;
  hyper.eps = 1e-8f;
  hyper.weight_decay = 0.1f;
  return hyper;
}

std::vector<double> step_allowed(const std::vector<float>& expected, int t, double lr) {
  return allowed_error(expected, 32.0 * t * kFp32Roundoff * lr, 32.0 * t * kFp32Roundoff);
}

// m_size = beta1 m_size + (1 - beta1) |g * grad_scale|: the magnitude of m's terms.
void advance_m_size(std::vector<float>& m_size, const std::vector<float>& grads, float beta1,
                    float grad_scale) {
  for (size_t i = 0; i < m_size.size(); ++i)
    m_size[i] = beta1 * m_size[i] + (1.0f - beta1) * std::fabs(grads[i] * grad_scale);
}

std::vector<double> m_allowed(const std::vector<float>& m_size, int t) {
  return allowed_error(m_size, 0.0, 32.0 * t * kFp32Roundoff);
}

TEST(GpuAdamW, Fp32MatchesCpuOverSteps) {
  GPT2_REQUIRE_GPU();
  const AdamWHyper hyper = test_hyper();
  const float grad_scale = 0.7f;
  for (int64_t N : kSizes) {
    std::vector<float> params = random_normal(N, 1001), m(N, 0.0f), v(N, 0.0f), m_size(N, 0.0f);
    DeviceBuffer<float> d_params(N), d_grads(N), d_m(N), d_v(N);
    d_params.upload(params);
    d_m.upload(m);
    d_v.upload(v);
    for (int t = 1; t <= kSteps; ++t) {
      const std::vector<float> grads = random_normal(N, 1100 + t, 0.5);
      d_grads.upload(grads);
      adamw_update(d_params.get(), static_cast<float*>(nullptr), d_grads.get(), d_m.get(),
                   d_v.get(), N, hyper, t, grad_scale, nullptr);
      cpu::adamw_update(params.data(), grads.data(), m.data(), v.data(), N, hyper, t,
                        grad_scale);
      const std::string tag = str_cat("fp32 N=", N, " t=", t);
      ASSERT_TRUE(expect_close("adamw params " + tag, d_params.download(), params,
                               step_allowed(params, t, hyper.lr)));
      advance_m_size(m_size, grads, hyper.beta1, grad_scale);
      ASSERT_TRUE(expect_close("adamw m " + tag, d_m.download(), m, m_allowed(m_size, t)));
      ASSERT_TRUE(expect_close("adamw v " + tag, d_v.download(), v, step_allowed(v, t, 0.0)));
    }
  }
}

TEST(GpuAdamW, Bf16MasterWeightsTrackCpuAndRoundToNearestEven) {
  GPT2_REQUIRE_GPU();
  const AdamWHyper hyper = test_hyper();
  const float grad_scale = 1.3f;
  for (int64_t N : kSizes) {
    std::vector<float> master = random_normal(N, 2001), m(N, 0.0f), v(N, 0.0f), m_size(N, 0.0f);
    DeviceBuffer<bf16> d_params(N), d_grads(N);
    DeviceBuffer<float> d_master(N), d_m(N), d_v(N);
    upload_floats(d_params, master);
    d_master.upload(master);
    d_m.upload(m);
    d_v.upload(v);
    for (int t = 1; t <= kSteps; ++t) {
      // The GPU sees bf16 gradients; the CPU gets the same values in fp32.
      const std::vector<float> grads = round_through<bf16>(random_normal(N, 2100 + t, 0.5));
      upload_floats(d_grads, grads);
      d_params.poison();
      adamw_update(d_params.get(), d_master.get(), d_grads.get(), d_m.get(), d_v.get(), N, hyper,
                   t, grad_scale, nullptr);
      cpu::adamw_update(master.data(), grads.data(), m.data(), v.data(), N, hyper, t,
                        grad_scale);
      const std::string tag = str_cat("bf16 N=", N, " t=", t);
      const std::vector<float> got_master = d_master.download();
      ASSERT_TRUE(expect_close("adamw master " + tag, got_master, master,
                               step_allowed(master, t, hyper.lr)));
      advance_m_size(m_size, grads, hyper.beta1, grad_scale);
      ASSERT_TRUE(expect_close("adamw m " + tag, d_m.download(), m, m_allowed(m_size, t)));
      ASSERT_TRUE(expect_close("adamw v " + tag, d_v.download(), v, step_allowed(v, t, 0.0)));
      const std::vector<bf16> got_params = d_params.download();
      for (int64_t i = 0; i < N; ++i) {
        ASSERT_EQ(bf16_bits(got_params[i]), float_to_bf16_bits(got_master[i]))
            << "bf16 parameter " << i << " is not its master weight " << got_master[i]
            << " rounded to nearest even (step " << t << ")";
      }
    }
  }
}

// One launch over a segment table gives the bits of one adamw_update per segment: segments of
// odd sizes, with gaps between them in the parameters and in the state, the parameters in
// another order than the state, an empty segment, weight decay on some. Elements outside every
// segment stay as they were. bf16 parameters with fp32 gradients (ZeRO-1) and fp32 alike.
// packed: every offset and size a multiple of 4 instead, so the table's launch takes its packed
// path (4 elements a thread) while adamw_update goes element by element: the same bits (bf16
// parameters here with bf16 gradients, as one GPU trains).
// Two segments carry an amax (--precision fp8's weights): each is raised to the largest finite
// |parameter| of its segment as the update stored it, and, on a step the device control skips,
// to that of the parameters as they are, which stay untouched.
template <typename T_, typename G_ = float>
void check_segments_match_per_segment_updates(bool packed) {
  const AdamWHyper hyper = test_hyper();
  const float grad_scale = 0.9f;
  constexpr bool kBf16 = std::is_same_v<T_, bf16>;
  std::vector<AdamWSegment> segments = {
      {/*param*/ 70100, /*state*/ 3, 70001, true}, {0, 70010, 1, false},
      {5, 70020, 0, true},                         {9, 70030, 1003, true},
      {2000, 71040, 65536 + 17, false}};
  if (packed)
    segments = {{/*param*/ 70100, /*state*/ 4, 70004, true}, {0, 70012, 4, false},
                {8, 70020, 0, true},                         {12, 70032, 1004, true},
                {2000, 71040, 65536 + 16, false}};
  const int64_t num_params = 70100 + 70004 + 8, num_state = 71040 + 65536 + 17 + 11;
  const std::vector<float> init = random_normal(num_params, 3001);
  DeviceBuffer<T_> p_one(num_params), p_each(num_params);
  DeviceBuffer<float> master_one(num_state), master_each(num_state);
  DeviceBuffer<G_> grads(num_state);
  DeviceBuffer<float> m_one(num_state), v_one(num_state), m_each(num_state), v_each(num_state);
  for (DeviceBuffer<T_>* p : {&p_one, &p_each}) upload_floats(*p, init);
  const std::vector<float> master_init = random_normal(num_state, 3002);
  for (DeviceBuffer<float>* b : {&master_one, &master_each}) b->upload(master_init);
  for (DeviceBuffer<float>* b : {&m_one, &v_one, &m_each, &v_each})
    b->upload(std::vector<float>(num_state, 0.0f));
  DeviceBuffer<char> table_memory(adamw_segment_table_bytes(segments.size()));
  const AdamWSegmentTable table = upload_adamw_segments(table_memory.get(), segments, nullptr);
  EXPECT_EQ(table.total, packed ? 70004 + 4 + 1004 + 65536 + 16 : 70001 + 1 + 1003 + 65536 + 17);
  EXPECT_EQ(table.packable, packed);
  DeviceBuffer<float> amax(2);
  segments[0].amax = amax.get();
  segments[3].amax = amax.get() + 1;
  DeviceBuffer<char> amax_table_memory(adamw_segment_table_bytes(segments.size()));
  const AdamWSegmentTable with_amax =
      upload_adamw_segments(amax_table_memory.get(), segments, nullptr);
  EXPECT_TRUE(with_amax.has_amax);
  EXPECT_FALSE(table.has_amax);
  // The largest finite |parameter| of segments 0 and 3, on the host.
  const auto largest = [&](const std::vector<float>& params) {
    std::vector<float> result;
    for (int i : {0, 3}) {
      float m = 0.0f;
      for (int64_t k = 0; k < segments[i].count; ++k) {
        const float x = std::fabs(params[segments[i].param_offset + k]);
        if (std::isfinite(x)) m = std::max(m, x);
      }
      result.push_back(m);
    }
    return result;
  };
  float* master = kBf16 ? master_one.get() : nullptr;
  float* master_per_segment = kBf16 ? master_each.get() : nullptr;
  for (int t = 1; t <= 3; ++t) {
    upload_floats(grads, random_normal(num_state, 3100 + t, 0.5));
    amax.upload({0.0f, 0.0f});
    adamw_update_segments<T_, G_>(p_one.get(), master, grads.get(), m_one.get(), v_one.get(),
                                     with_amax, hyper, t, grad_scale, nullptr);
    EXPECT_EQ(amax.download(), largest(download_floats(p_one))) << "step " << t;
    for (const AdamWSegment& segment : segments) {
      AdamWHyper segment_hyper = hyper;
      if (!segment.decays) segment_hyper.weight_decay = 0.0f;
      const int64_t st = segment.state_offset;
      adamw_update<T_, G_>(p_each.get() + segment.param_offset,
                              master_per_segment ? master_per_segment + st : nullptr,
                              grads.get() + st, m_each.get() + st, v_each.get() + st,
                              segment.count, segment_hyper, t, grad_scale, nullptr);
    }
  }
  const auto bits_equal = [](const char* what, const auto& got, const auto& want) {
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(got[0])))
        << what << ": one launch over the table differs from one launch per segment";
  };
  bits_equal("parameters", p_one.download(), p_each.download());
  bits_equal("master", master_one.download(), master_each.download());
  bits_equal("m", m_one.download(), m_each.download());
  bits_equal("v", v_one.download(), v_each.download());
  // Untouched outside the segments: parameter 5 and state 0 belong to none.
  const std::vector<float> params = download_floats(p_one);
  EXPECT_EQ(params[5], round_through<T_>({init[5]})[0]);
  EXPECT_EQ(m_one.download()[0], 0.0f);

  // A skipped step: nothing updated, the amaxes those of the parameters as they are.
  DeviceBuffer<AdamWDeviceControl> control(1);
  AdamWDeviceControl skip;
  skip.skip = 1;
  control.upload({skip});
  amax.upload({0.0f, 0.0f});
  const std::vector<unsigned char> before = p_one.download_bytes();
  adamw_update_segments<T_, G_>(p_one.get(), master, grads.get(), m_one.get(), v_one.get(),
                                with_amax, hyper, 4, grad_scale, nullptr, control.get());
  EXPECT_EQ(p_one.download_bytes(), before) << "a skipped step changed the parameters";
  EXPECT_EQ(amax.download(), largest(params));
}

TEST(GpuAdamW, SegmentTableMatchesOneUpdatePerSegmentBf16) {
  GPT2_REQUIRE_GPU();
  check_segments_match_per_segment_updates<bf16>(/*packed=*/false);
}

TEST(GpuAdamW, PackedSegmentTableMatchesOneUpdatePerSegmentBf16) {
  GPT2_REQUIRE_GPU();
  check_segments_match_per_segment_updates<bf16, bf16>(/*packed=*/true);
}

TEST(GpuAdamW, SegmentTableMatchesOneUpdatePerSegmentFp32) {
  GPT2_REQUIRE_GPU();
  check_segments_match_per_segment_updates<float>(/*packed=*/false);
}

TEST(GpuAdamW, PackedSegmentTableMatchesOneUpdatePerSegmentFp32) {
  GPT2_REQUIRE_GPU();
  check_segments_match_per_segment_updates<float>(/*packed=*/true);
}

TEST(GpuAdamWPreconditions, MasterWeightsMatchTheStorageType) {
  // These checks come before any CUDA call, so they run without a GPU too; the messages
  // prove it was the check (a failed launch would throw a different gpt2::Error).
  float f[4] = {};
  bf16 h[4] = {};
  const AdamWHyper hyper = test_hyper();
  try {
    adamw_update(f, f, f, f, f, 4, hyper, 1, 1.0f, nullptr);
    ADD_FAILURE() << "fp32 parameters with a master copy were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("master"), std::string::npos) << e.what();
  }
  try {
    adamw_update(h, static_cast<float*>(nullptr), h, f, f, 4, hyper, 1, 1.0f, nullptr);
    ADD_FAILURE() << "bf16 parameters without a master copy were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("master"), std::string::npos) << e.what();
  }
  try {
    adamw_update(f, static_cast<float*>(nullptr), f, f, f, 4, hyper, 0, 1.0f, nullptr);
    ADD_FAILURE() << "step t = 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1-based"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpt2::gpu::test
