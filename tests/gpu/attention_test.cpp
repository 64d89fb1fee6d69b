// GPU attention kernels (naive, portable flash, Hopper flash; bf16 and fp32), each through the
// attention dispatch, against an fp64 CPU reference.
//
// The rule for bf16 (FlashAttention's): the kernel's error against the fp64 reference is at
// most twice the error of the plain same-precision implementation (our naive GPU attention:
// cuBLAS GEMMs with bf16 outputs and a materialized bf16 P) plus a small epsilon. Errors are
// relative L2 norms over whole tensors (out, lse, dqkv), reported for every case. Inputs are
// rounded to the storage type first, so every implementation sees the same values; outputs are
// poisoned with NaN before each launch, so an unwritten element fails.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/gpu/attention.cuh"
#include "kernels/gpu/attention_hopper.cuh"
#include "kernels/gpu/context.cuh"

namespace gpt2::gpu::test {
namespace {

struct AttentionShape {
  int B, T, NH, HS;
  double input_scale;  // std of q, k, v (larger = peakier softmax)
};

std::string describe(const AttentionShape& s) {
  return str_cat("B=", s.B, " T=", s.T, " NH=", s.NH, " HS=", s.HS, " scale=", s.input_scale);
}

// ||got - ref|| / ||ref||, and whether every value is finite.
double relative_l2(const std::vector<float>& got, const std::vector<double>& ref, bool* finite) {
  double diff = 0.0, norm = 0.0;
  *finite = true;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) *finite = false;
    diff += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

struct AttentionResult {
  std::vector<float> out, lse, dqkv;
};

struct Reference {
  std::vector<double> out, lse, dqkv;
};

Reference reference_attention(const std::vector<float>& qkv, const std::vector<float>& dout,
                              const AttentionShape& s) {
  const int C = s.NH * s.HS;
  std::vector<double> qkv_d(qkv.begin(), qkv.end());
  std::vector<double> dout_d(dout.begin(), dout.end());
  Reference ref;
  ref.out.resize(static_cast<size_t>(s.B) * s.T * C);
  ref.lse.resize(static_cast<size_t>(s.B) * s.NH * s.T);
  ref.dqkv.resize(qkv.size());
  std::vector<double> probs(static_cast<size_t>(s.B) * s.NH * s.T * s.T);
  cpu::attention_naive_forward(ref.out.data(), probs.data(), qkv_d.data(), s.B, s.T, C, s.NH);
  cpu::attention_naive_backward(ref.dqkv.data(), dout_d.data(), qkv_d.data(), probs.data(), s.B,
                                s.T, C, s.NH);
  std::vector<double> flash_out(ref.out.size());
  cpu::attention_flash_forward(flash_out.data(), ref.lse.data(), qkv_d.data(), s.B, s.T, C, s.NH);
  return ref;
}

// The Hopper kernels' knobs (AttentionConfig's defaults unless a test sets them).
struct HopperKnobs {
  bool deterministic = true;
  int racing_from_t = kHopperRacingFromT;
  int converts_dq_from_t = kHopperConvertsDqFromT;
  int stages_grads_max_t = kHopperStagesGradsMaxT;
  int backward_max_blocks = 0;
  int forward_max_blocks = 0;
  int forward_persistent_max_t = -1;
  HopperForwardShape forward_shape = HopperForwardShape::kAuto;
  QueryRows rows;  // all rows unless set
};

// One forward + backward through the attention dispatch with the given kernel; every output
// (out, saved, dqkv) and the workspace are poisoned first.
template <typename T_>
AttentionResult run_attention(AttentionKernel kernel, const std::vector<float>& qkv,
                              const std::vector<float>& dout, const AttentionShape& s,
                              const Context& ctx, const HopperKnobs& knobs = {}) {
  const int C = s.NH * s.HS;
  const int64_t n_out = static_cast<int64_t>(s.B) * s.T * C;
  AttentionConfig config;
  config.B = s.B;
  config.T = s.T;
  config.C = C;
  config.NH = s.NH;
  config.bf16 = std::is_same_v<T_, bf16>;
  config.kernel = kernel;
  config.deterministic = knobs.deterministic;
  config.backward_racing_from_t = knobs.racing_from_t;
  config.backward_converts_dq_from_t = knobs.converts_dq_from_t;
  config.backward_stages_grads_max_t = knobs.stages_grads_max_t;
  config.backward_max_blocks = knobs.backward_max_blocks;
  config.forward_max_blocks = knobs.forward_max_blocks;
  config.forward_persistent_max_t = knobs.forward_persistent_max_t;
  config.forward_shape = knobs.forward_shape;
  config.rows = knobs.rows;
  DeviceBuffer<T_> d_qkv(3 * n_out), d_dout(n_out), d_out(n_out), d_dqkv(3 * n_out);
  DeviceBuffer<unsigned char> saved(static_cast<int64_t>(attention_saved_bytes(config)));
  DeviceBuffer<unsigned char> workspace(static_cast<int64_t>(attention_workspace_bytes(config)));
  upload_floats(d_qkv, qkv);
  upload_floats(d_dout, dout);
  d_out.poison();
  d_dqkv.poison();
  saved.poison();
  workspace.poison();
  AttentionTensors tensors;
  tensors.qkv = d_qkv.get();
  tensors.out = d_out.get();
  tensors.saved = saved.get();
  tensors.workspace = workspace.get();
  attention_forward(config, tensors, ctx);
  tensors.dout = d_dout.get();
  tensors.dqkv = d_dqkv.get();
  attention_backward(config, tensors, ctx);
  ctx.synchronize();
  AttentionResult result{download_floats(d_out), {}, download_floats(d_dqkv)};
  if (kernel != AttentionKernel::kNaive) {
    const std::vector<unsigned char> bytes = saved.download_bytes();
    result.lse.resize(bytes.size() / sizeof(float));
    std::memcpy(result.lse.data(), bytes.data(), bytes.size());
  }
  return result;
}

// Random bf16-representable inputs of a shape: qkv from `seed`, dO from seed + 1.
struct RandomInputs {
  std::vector<float> qkv, dout;
};
RandomInputs random_inputs(const AttentionShape& s, uint64_t seed) {
  const int64_t n_out = static_cast<int64_t>(s.B) * s.T * s.NH * s.HS;
  return {round_through<bf16>(random_normal(3 * n_out, seed)),
          round_through<bf16>(random_normal(n_out, seed + 1))};
}

// The same dqkv bits from two settings of the Hopper kernels, each run with blocks that take
// many items (3) and with one a block's share (0).
void expect_same_gradients(const AttentionShape& s, uint64_t seed, HopperKnobs a, HopperKnobs b) {
  const auto [qkv, dout] = random_inputs(s, seed);
  Context ctx;
  for (const int max_blocks : {3, 0}) {
    a.backward_max_blocks = b.backward_max_blocks = max_blocks;
    const AttentionResult from_a =
        run_attention<bf16>(AttentionKernel::kFlashHopper, qkv, dout, s, ctx, a);
    const AttentionResult from_b =
        run_attention<bf16>(AttentionKernel::kFlashHopper, qkv, dout, s, ctx, b);
    EXPECT_EQ(from_a.dqkv, from_b.dqkv) << describe(s) << ", blocks " << max_blocks;
  }
}

/// Skips the calling test (with the reason) when `kernel` cannot run here with storage T_.
template <typename T_>
bool kernel_runs_here(AttentionKernel kernel, int head_size, std::string* why) {
  if (kernel != AttentionKernel::kFlashHopper) return true;
  return attention_hopper_supported(std::is_same_v<T_, bf16>, head_size, why);
}

#define GPT2_REQUIRE_ATTENTION_KERNEL(T_, kernel, head_size)                        \
  do {                                                                              \
    std::string gpt2_why_;                                                          \
    if (!kernel_runs_here<T_>(kernel, head_size, &gpt2_why_))                       \
      GTEST_SKIP() << to_string(kernel) << " does not run here: " << gpt2_why_;     \
  } while (0)

// The kernel against fp64 and against naive attention of the same storage type (the FA2 rule).
template <typename T_>
void check_attention(AttentionKernel kernel, const AttentionShape& s, uint64_t seed,
                     const HopperKnobs& knobs = {}) {
  const int C = s.NH * s.HS;
  const int64_t n_out = static_cast<int64_t>(s.B) * s.T * C;
  const std::vector<float> qkv = round_through<T_>(random_normal(3 * n_out, seed, s.input_scale));
  const std::vector<float> dout = round_through<T_>(random_normal(n_out, seed + 1));
  const Reference ref = reference_attention(qkv, dout, s);
  Context ctx;
  const AttentionResult flash = run_attention<T_>(kernel, qkv, dout, s, ctx, knobs);
  const AttentionResult naive = run_attention<T_>(AttentionKernel::kNaive, qkv, dout, s, ctx);

  bool finite = true;
  const double flash_out = relative_l2(flash.out, ref.out, &finite);
  EXPECT_TRUE(finite) << "flash out has non-finite values";
  const double flash_lse = relative_l2(flash.lse, ref.lse, &finite);
  EXPECT_TRUE(finite) << "flash lse has non-finite values";
  const double flash_grad = relative_l2(flash.dqkv, ref.dqkv, &finite);
  EXPECT_TRUE(finite) << "flash dqkv has non-finite values";
  const double naive_out = relative_l2(naive.out, ref.out, &finite);
  EXPECT_TRUE(finite) << "naive out has non-finite values";
  const double naive_grad = relative_l2(naive.dqkv, ref.dqkv, &finite);
  EXPECT_TRUE(finite) << "naive dqkv has non-finite values";
  std::printf("[ attention] %-4s %-14s %-38s fwd %-7s rel-L2 vs fp64: out %.2e "
              "naive %.2e | dqkv %.2e naive %.2e | lse %.2e\n",
              Storage<T_>::kName, to_string(kernel), describe(s).c_str(),
              to_string(knobs.forward_shape), flash_out, naive_out, flash_grad, naive_grad,
              flash_lse);

  // fp32 is exact arithmetic up to accumulation order; bf16 follows the 2x-naive rule.
  const bool is_bf16 = std::is_same_v<T_, bf16>;
  const double eps = is_bf16 ? 1e-4 : 2e-6;
  const double abs_limit = is_bf16 ? 2e-2 : 2e-5;
  EXPECT_LE(flash_out, 2 * naive_out + eps) << describe(s);
  EXPECT_LE(flash_grad, 2 * naive_grad + eps) << describe(s);
  EXPECT_LE(flash_out, abs_limit) << describe(s);
  EXPECT_LE(flash_grad, abs_limit) << describe(s);
  EXPECT_LE(naive_out, abs_limit) << describe(s);
  EXPECT_LE(naive_grad, abs_limit) << describe(s);
  EXPECT_LE(flash_lse, is_bf16 ? 1e-3 : 1e-6) << describe(s);  // lse stays fp32 throughout
}

class GpuAttentionTest : public ::testing::TestWithParam<AttentionShape> {};

// Every forward block shape the Hopper kernel has.
std::vector<HopperForwardShape> hopper_forward_shapes() {
  return {HopperForwardShape::kRows128, HopperForwardShape::kRows64,
          HopperForwardShape::kRows64NoProducer};
}

TEST_P(GpuAttentionTest, Bf16PortableFlashMatchesFp64Reference) {
  GPT2_REQUIRE_GPU();
  check_attention<bf16>(AttentionKernel::kFlashPortable, GetParam(), 1000 + GetParam().T);
}

// Every shape of forward block: 128 query rows, 64 (two blocks per SM), and 64 rows without a
// producer warpgroup (three blocks per SM at head size 64, two at 128).
TEST_P(GpuAttentionTest, Bf16HopperFlashMatchesFp64Reference) {
  GPT2_REQUIRE_GPU();
  GPT2_REQUIRE_ATTENTION_KERNEL(bf16, AttentionKernel::kFlashHopper, GetParam().HS);
  for (const HopperForwardShape shape : hopper_forward_shapes()) {
    HopperKnobs knobs;
    knobs.forward_shape = shape;
    check_attention<bf16>(AttentionKernel::kFlashHopper, GetParam(), 1000 + GetParam().T, knobs);
  }
}

// The racing dQ order (what training runs unless --attn-deterministic=1) on every shape, with
// the forward's own choice of block.
TEST_P(GpuAttentionTest, Bf16HopperRacingBackwardMatchesFp64Reference) {
  GPT2_REQUIRE_GPU();
  GPT2_REQUIRE_ATTENTION_KERNEL(bf16, AttentionKernel::kFlashHopper, GetParam().HS);
  HopperKnobs racing;
  racing.deterministic = false;
  racing.racing_from_t = 1;  // the racing kernel itself, at every T
  check_attention<bf16>(AttentionKernel::kFlashHopper, GetParam(), 3000 + GetParam().T, racing);
}

TEST_P(GpuAttentionTest, Fp32PortableFlashMatchesFp64Reference) {
  GPT2_REQUIRE_GPU();
  check_attention<float>(AttentionKernel::kFlashPortable, GetParam(), 2000 + GetParam().T);
}

// T around the 64- and 128-row tiles of both flash kernels, B and NH not powers of two.
INSTANTIATE_TEST_SUITE_P(
    Shapes, GpuAttentionTest,
    ::testing::Values(AttentionShape{3, 1, 3, 64, 1.0}, AttentionShape{3, 63, 3, 64, 1.0},
                      AttentionShape{3, 64, 3, 64, 1.0}, AttentionShape{3, 65, 3, 64, 1.0},
                      AttentionShape{3, 127, 3, 64, 1.0}, AttentionShape{3, 128, 3, 64, 1.0},
                      AttentionShape{3, 129, 3, 64, 1.0}, AttentionShape{1, 1000, 3, 64, 1.0},
                      AttentionShape{1, 4096, 3, 64, 1.0}, AttentionShape{2, 97, 3, 64, 3.0},
                      AttentionShape{3, 1, 3, 128, 1.0}, AttentionShape{3, 63, 3, 128, 1.0},
                      AttentionShape{3, 65, 3, 128, 1.0}, AttentionShape{3, 128, 3, 128, 1.0},
                      AttentionShape{3, 129, 3, 128, 1.0}, AttentionShape{1, 1000, 3, 128, 1.0},
                      AttentionShape{1, 4096, 3, 128, 1.0}, AttentionShape{1, 300, 3, 128, 2.0}),
    [](const ::testing::TestParamInfo<AttentionShape>& shape_info) {
      const AttentionShape& s = shape_info.param;
      return str_cat("B", s.B, "_T", s.T, "_NH", s.NH, "_HS", s.HS, "_x",
                     static_cast<int>(s.input_scale));
    });

// QueryRows (context parallelism's rows of a whole sequence): with dout zero off the rows, the
// rows' out, lse and dQ, and dK, dV up to the last row, are those of full causal attention with
// that dout, against fp64 and the same-precision naive kernel (the FA2 rule, rows only). Ranges
// at an offset, two ranges with a gap, one ending at a ragged T; the portable kernels (which
// compute every row) hold the same contract.
struct RowsCase {
  AttentionShape shape;
  QueryRows rows;
};

// Values of a (B, T, width) tensor (or (B*NH, T) with width 1 and outer B*NH) at rows t for
// which keep(t), within columns [col, col + cols) of each row.
std::vector<double> pick_rows(const std::vector<double>& v, int outer, int T, int width, int col,
                              int cols, const std::function<bool(int)>& keep) {
  std::vector<double> picked;
  for (int o = 0; o < outer; ++o)
    for (int t = 0; t < T; ++t)
      if (keep(t))
        for (int c = col; c < col + cols; ++c)
          picked.push_back(v[(static_cast<size_t>(o) * T + t) * width + c]);
  return picked;
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

template <typename T_>
void check_query_rows_case(AttentionKernel kernel, const RowsCase& c, uint64_t seed,
                           HopperForwardShape shape = HopperForwardShape::kAuto) {
  const AttentionShape& s = c.shape;
  const int C = s.NH * s.HS;
  const int64_t n_out = static_cast<int64_t>(s.B) * s.T * C;
  const auto in_rows = [&](int t) {
    for (int r = 0; r < c.rows.count; ++r)
      if (t >= c.rows.begin[r] && t < c.rows.end[r]) return true;
    return false;
  };
  const int last = c.rows.end[c.rows.count - 1];
  const auto before_last = [&](int t) { return t < last; };
  const std::vector<float> qkv = round_through<T_>(random_normal(3 * n_out, seed, s.input_scale));
  std::vector<float> dout = round_through<T_>(random_normal(n_out, seed + 1));
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      if (!in_rows(t))
        std::fill_n(dout.begin() + (static_cast<int64_t>(b) * s.T + t) * C, C, 0.0f);
  const Reference ref = reference_attention(qkv, dout, s);
  Context ctx;
  HopperKnobs knobs;
  knobs.rows = c.rows;
  knobs.forward_shape = shape;
  const AttentionResult got = run_attention<T_>(kernel, qkv, dout, s, ctx, knobs);
  const AttentionResult naive = run_attention<T_>(AttentionKernel::kNaive, qkv, dout, s, ctx);
  struct Part {
    const char* name;
    std::vector<double> got, naive, ref;
  };
  auto part = [&](const char* name, int outer, int width, int col, int cols,
                  const std::function<bool(int)>& keep, const std::vector<float>& g,
                  const std::vector<float>& n, const std::vector<double>& r) {
    return Part{name, pick_rows(widen(g), outer, s.T, width, col, cols, keep),
                n.empty() ? std::vector<double>() : pick_rows(widen(n), outer, s.T, width, col,
                                                              cols, keep),
                pick_rows(r, outer, s.T, width, col, cols, keep)};
  };
  const std::vector<Part> parts = {
      part("out", s.B, C, 0, C, in_rows, got.out, naive.out, ref.out),
      part("lse", s.B * s.NH, 1, 0, 1, in_rows, got.lse, {}, ref.lse),
      part("dq", s.B, 3 * C, 0, C, in_rows, got.dqkv, naive.dqkv, ref.dqkv),
      part("dkv", s.B, 3 * C, C, 2 * C, before_last, got.dqkv, naive.dqkv, ref.dqkv)};
  const bool is_bf16 = std::is_same_v<T_, bf16>;
  for (const Part& p : parts) {
    bool finite = true;
    const std::vector<float> got_f(p.got.begin(), p.got.end());
    const double error = relative_l2(got_f, p.ref, &finite);
    EXPECT_TRUE(finite) << p.name << " has non-finite values";
    double naive_error = 0.0;
    if (!p.naive.empty()) {
      const std::vector<float> naive_f(p.naive.begin(), p.naive.end());
      naive_error = relative_l2(naive_f, p.ref, &finite);
    }
    std::printf("[ attention] rows %-4s %-14s %-30s %-3s rel-L2 vs fp64 %.2e naive %.2e\n",
                Storage<T_>::kName, to_string(kernel), describe(s).c_str(), p.name, error,
                naive_error);
    if (p.naive.empty()) {
      EXPECT_LE(error, is_bf16 ? 1e-3 : 1e-6) << p.name << " " << describe(s);
    } else {
      EXPECT_LE(error, 2 * naive_error + (is_bf16 ? 1e-4 : 2e-6)) << p.name << " " << describe(s);
      EXPECT_LE(error, is_bf16 ? 2e-2 : 2e-5) << p.name << " " << describe(s);
    }
  }
}

const std::vector<RowsCase>& rows_cases() {
  static const std::vector<RowsCase> cases = {
      {{2, 700, 3, 64, 1.0}, {2, {128, 384}, {256, 700}}},
      {{1, 1000, 3, 64, 1.0}, {1, {256, 0}, {640, 0}}},
      {{2, 513, 3, 128, 1.0}, {2, {0, 256}, {128, 513}}},
      {{1, 1024, 3, 128, 2.0}, {2, {256, 768}, {512, 896}}},
      // Rows past 1024 in the persistent forward (head size 64: up to T = 4096,
      // hopper_forward_persistent_max_t); a block an item: T = 4200 below.
      {{1, 1300, 3, 64, 1.0}, {2, {256, 1024}, {640, 1300}}}};
  return cases;
}

TEST(GpuAttentionRows, Bf16HopperComputesItsRowsOnly) {
  GPT2_REQUIRE_GPU();
  for (const RowsCase& c : rows_cases()) {
    std::string why;
    if (!kernel_runs_here<bf16>(AttentionKernel::kFlashHopper, c.shape.HS, &why))
      GTEST_SKIP() << "flash-hopper does not run here: " << why;
    for (const HopperForwardShape shape : hopper_forward_shapes()) {
      SCOPED_TRACE(to_string(shape));
      check_query_rows_case<bf16>(AttentionKernel::kFlashHopper, c, 77 + c.shape.T, shape);
    }
  }
}

// From 8 key blocks (T > 896) the deterministic Hopper backward walks each item's query tiles
// from the last down (first_tile in attention_hopper_backward.cu): its rows, across a gap
// between two ranges and to a ragged end, against fp64 and naive.
TEST(GpuAttentionRows, Bf16HopperDeterministicWalkDownComputesItsRows) {
  GPT2_REQUIRE_GPU();
  GPT2_REQUIRE_ATTENTION_KERNEL(bf16, AttentionKernel::kFlashHopper, 64);
  const RowsCase c{{1, 4200, 2, 64, 1.0}, {2, {512, 2048}, {1024, 4200}}};
  check_query_rows_case<bf16>(AttentionKernel::kFlashHopper, c, 79);
}

TEST(GpuAttentionRows, PortableKernelsKeepTheRowsContract) {
  GPT2_REQUIRE_GPU();
  for (const RowsCase& c : rows_cases()) {
    check_query_rows_case<bf16>(AttentionKernel::kFlashPortable, c, 88 + c.shape.T);
    check_query_rows_case<float>(AttentionKernel::kFlashPortable, c, 99 + c.shape.T);
  }
}

TEST(GpuAttentionRows, RowsOffTheirGranuleAreRefused) {
  AttentionConfig config;
  config.T = 1000;
  config.rows = {1, {64, 0}, {512, 0}};
  EXPECT_THROW(check_query_rows(config.rows, config.T), Error);
  config.rows = {2, {256, 128}, {512, 384}};  // out of order
  EXPECT_THROW(check_query_rows(config.rows, config.T), Error);
  config.rows = {1, {896, 0}, {1000, 0}};  // ends at T: fine
  EXPECT_NO_THROW(check_query_rows(config.rows, config.T));
}

// A forward-only config (inference) sizes the workspace for the forward's use alone: the naive
// kernel's permuted Q, K, V and O (4,B,T,C), the Hopper forward's work counter, nothing for the
// portable flash forward; the backward's (naive: dO, dQ, dK, dV and dP/dS of (B,NH,T,T)) only
// with it. Host arithmetic: runs without a GPU.
TEST(GpuAttentionWorkspace, AForwardOnlyConfigHoldsTheForwardsScratchAlone) {
  AttentionConfig config;
  config.B = 2;
  config.T = 96;
  config.C = 128;
  config.NH = 2;
  const size_t BTC = 2 * 96 * 128, probs = size_t{2} * 2 * 96 * 96;
  for (const bool bf16 : {true, false}) {
    config.bf16 = bf16;
    const size_t x = bf16 ? 2 : 4;
    config.kernel = AttentionKernel::kNaive;
    config.backward = true;
    EXPECT_EQ(attention_workspace_bytes(config), (7 * BTC + probs) * x);
    config.backward = false;
    EXPECT_EQ(attention_workspace_bytes(config), 4 * BTC * x);
    for (const AttentionKernel flash :
         {AttentionKernel::kFlashPortable, AttentionKernel::kFlashHopper}) {
      config.kernel = flash;
      config.backward = true;
      EXPECT_GT(attention_workspace_bytes(config), 0u) << to_string(flash);
      config.backward = false;
      EXPECT_EQ(attention_workspace_bytes(config),
                flash == AttentionKernel::kFlashHopper ? kHopperForwardWorkspaceBytes : 0u)
          << to_string(flash);
    }
  }
}

// The Hopper launchers' tuning knobs (README: gpt2-attention-bench): unset, the default; a
// whole number, its value; anything else an error naming the variable. Host code: no GPU needed.
TEST(GpuAttentionHopper, TuningKnobsTakeWholeNumbersOnly) {
  const char* name = "GPT2_TEST_HOPPER_TUNING_KNOB";
  ::unsetenv(name);
  EXPECT_EQ(attention_hopper_env_knob(name, 32), 32);
  ::setenv(name, "8", 1);
  EXPECT_EQ(attention_hopper_env_knob(name, 32), 8);
  ::setenv(name, "0", 1);
  EXPECT_EQ(attention_hopper_env_knob(name, 32), 0);
  for (const char* bad : {"", "x", "8x", "-1", " 8", "99999999999"}) {
    ::setenv(name, bad, 1);
    try {
      attention_hopper_env_knob(name, 32);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  ::unsetenv(name);
}

// The racing (non-deterministic) dQ order of the Hopper backward is as accurate: at head size
// 64 each consumer adds one 64 x 64 block of a tile, at 128 the whole tile over its own keys;
// with two batches, and at T = 1100 (9 key blocks, a ragged last one) with larger scores.
TEST(GpuAttentionHopper, NondeterministicModeMatchesFp64Reference) {
  GPT2_REQUIRE_GPU();
  for (const int head_size : {64, 128}) {
    GPT2_REQUIRE_ATTENTION_KERNEL(bf16, AttentionKernel::kFlashHopper, head_size);
    HopperKnobs racing;
    racing.deterministic = false;
    racing.racing_from_t = 1;  // the racing kernel itself, at every T
    check_attention<bf16>(AttentionKernel::kFlashHopper,
                          AttentionShape{2, 777, 3, head_size, 1.0}, 31, racing);
    check_attention<bf16>(AttentionKernel::kFlashHopper,
                          AttentionShape{1, 1100, 3, head_size, 2.0}, 33, racing);
  }
}

// Racing mode takes the fixed dQ order below kHopperRacingFromT (the faster one there): the
// same bits as deterministic mode at T = 777 and 1100, and the racing kernel from the threshold
// up (a threshold of 1100 here, and at T = 1100 a racing run against fp64, the bits left to
// the race).
TEST(GpuAttentionHopper, RacingModeTakesTheFixedOrderBelowItsThreshold) {
  GPT2_REQUIRE_GPU();
  static_assert(kHopperRacingFromT > 1100);
  for (const int head_size : {64, 128}) {
    GPT2_REQUIRE_ATTENTION_KERNEL(bf16, AttentionKernel::kFlashHopper, head_size);
    HopperKnobs racing;
    racing.deterministic = false;
    for (const int T : {777, 1100}) {
      const AttentionShape s{2, T, 3, head_size, 1.0};
      const auto [qkv, dout] = random_inputs(s, 51);
      Context ctx;
      const AttentionResult fixed =
          run_attention<bf16>(AttentionKernel::kFlashHopper, qkv, dout, s, ctx);
      const AttentionResult raced =
          run_attention<bf16>(AttentionKernel::kFlashHopper, qkv, dout, s, ctx, racing);
      EXPECT_EQ(raced.dqkv, fixed.dqkv) << describe(s);
    }
    racing.racing_from_t = 1100;
    check_attention<bf16>(AttentionKernel::kFlashHopper, AttentionShape{1, 1100, 3, head_size, 1.0},
                          53, racing);
  }
}

// The deterministic backward's in-kernel dQ conversion (head size 64, from
// kHopperConvertsDqFromT; forced on at every T here, and off) gives the third launch's bits,
// with blocks that take many items (3) and one a block's share (0), and on a ragged T; at head
// size 128 the setting changes nothing. Checked against fp64 as well.
TEST(GpuAttentionHopper, InKernelDqConversionGivesTheThirdLaunchsBits) {
  GPT2_REQUIRE_GPU();
  for (const int head_size : {64, 128}) {
    GPT2_REQUIRE_ATTENTION_KERNEL(bf16, AttentionKernel::kFlashHopper, head_size);
    for (const int T : {777, 1100}) {
      const AttentionShape s{2, T, 3, head_size, 1.0};
      HopperKnobs in_kernel, third_launch;
      in_kernel.converts_dq_from_t = 1;
      third_launch.converts_dq_from_t = 1 << 30;
      expect_same_gradients(s, 55, in_kernel, third_launch);
      check_attention<bf16>(AttentionKernel::kFlashHopper, s, 57, in_kernel);
    }
  }
}

// The backward at head size 128 writes dK and dV through shared memory (up to
// kHopperStagesGradsMaxT) or from registers: the same bits, in both modes, with blocks that
// take many items (3) and one a block's share (0), on a ragged T and with rows past T in the
// last key block; each against fp64 as well. (Head size 64 always stages: every other test.)
TEST(GpuAttentionHopper, StagedGradientsGiveTheRegisterStoresBits) {
  GPT2_REQUIRE_GPU();
  GPT2_REQUIRE_ATTENTION_KERNEL(bf16, AttentionKernel::kFlashHopper, 128);
  for (const int T : {300, 1100}) {
    const AttentionShape s{2, T, 3, 128, 1.0};
    HopperKnobs staged, from_registers;
    staged.stages_grads_max_t = 1 << 30;
    from_registers.stages_grads_max_t = 0;
    expect_same_gradients(s, 61, staged, from_registers);
    for (const int max_t : {1 << 30, 0}) {
      HopperKnobs knobs;
      knobs.stages_grads_max_t = max_t;
      knobs.deterministic = false;
      knobs.racing_from_t = 1;
      check_attention<bf16>(AttentionKernel::kFlashHopper, s, 63, knobs);
      knobs.deterministic = true;
      check_attention<bf16>(AttentionKernel::kFlashHopper, s, 64, knobs);
    }
  }
}

// Rows of out and dQ at a few query positions, from the fp64 definition, for shapes too large
// for a full reference: out_t = sum_j P_tj V_j, dQ_t = scale sum_j P_tj (dP_tj - D_t) K_j.
void reference_rows(const std::vector<float>& qkv, const std::vector<float>& dout, int T, int NH,
                    int HS, int t, int h, std::vector<double>* out_row,
                    std::vector<double>* dq_row) {
  const int C = NH * HS;
  const double scale = 1.0 / std::sqrt(double(HS));
  auto q = [&](int pos, int d) { return double(qkv[static_cast<size_t>(pos) * 3 * C + h * HS + d]); };
  auto k = [&](int pos, int d) { return double(qkv[static_cast<size_t>(pos) * 3 * C + C + h * HS + d]); };
  auto v = [&](int pos, int d) { return double(qkv[static_cast<size_t>(pos) * 3 * C + 2 * C + h * HS + d]); };
  std::vector<double> p(t + 1), dp(t + 1);
  double max_s = -INFINITY;
  for (int j = 0; j <= t; ++j) {
    double dot = 0;
    for (int d = 0; d < HS; ++d) dot += q(t, d) * k(j, d);
    p[j] = dot * scale;
    max_s = std::max(max_s, p[j]);
  }
  double sum = 0;
  for (int j = 0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - max_s));
  for (int j = 0; j <= t; ++j) p[j] /= sum;
  out_row->assign(HS, 0.0);
  dq_row->assign(HS, 0.0);
  for (int j = 0; j <= t; ++j)
    for (int d = 0; d < HS; ++d) (*out_row)[d] += p[j] * v(j, d);
  double dsum = 0;
  for (int d = 0; d < HS; ++d) dsum += double(dout[static_cast<size_t>(t) * C + h * HS + d]) * (*out_row)[d];
  for (int j = 0; j <= t; ++j) {
    double dot = 0;
    for (int d = 0; d < HS; ++d) dot += double(dout[static_cast<size_t>(t) * C + h * HS + d]) * v(j, d);
    const double ds = p[j] * (dot - dsum);
    for (int d = 0; d < HS; ++d) (*dq_row)[d] += scale * ds * k(j, d);
  }
  (void)T;
}

// B*NH*T*T = 8 * 16384^2 = 2^31 elements: the naive T x T buffers need 64-bit indexing. The
// last rows address the very end of them. Every flash kernel runs the same shape (no T x T
// buffer); rows are checked against the fp64 definition.
TEST(GpuAttentionLarge, NaiveAndFlashPast2To31Elements) {
  GPT2_REQUIRE_GPU();
  AttentionShape s{1, 16384, 8, 64, 1.0};
  const int C = s.NH * s.HS;
  const int64_t n_out = static_cast<int64_t>(s.B) * s.T * C;
  ASSERT_GE(static_cast<int64_t>(s.B) * s.NH * s.T * s.T, int64_t(1) << 31);
  const std::vector<float> qkv = round_through<bf16>(random_normal(3 * n_out, 77));
  const std::vector<float> dout = round_through<bf16>(random_normal(n_out, 78));
  Context ctx;
  std::vector<AttentionKernel> kernels = {AttentionKernel::kNaive, AttentionKernel::kFlashPortable};
  std::string why;
  if (attention_hopper_supported(true, s.HS, &why)) {
    kernels.push_back(AttentionKernel::kFlashHopper);
  } else {
    std::printf("[ attention] flash-hopper not run: %s\n", why.c_str());
  }
  std::vector<AttentionResult> results;
  for (AttentionKernel kernel : kernels) results.push_back(run_attention<bf16>(kernel, qkv, dout, s, ctx));
  for (int t : {0, 1, 8191, s.T - 2, s.T - 1}) {
    for (int h : {0, s.NH - 1}) {
      std::vector<double> out_row, dq_row;
      reference_rows(qkv, dout, s.T, s.NH, s.HS, t, h, &out_row, &dq_row);
      for (size_t k = 0; k < kernels.size(); ++k) {
        std::vector<float> got_out(s.HS), got_dq(s.HS);
        for (int d = 0; d < s.HS; ++d) {
          got_out[d] = results[k].out[static_cast<size_t>(t) * C + h * s.HS + d];
          got_dq[d] = results[k].dqkv[static_cast<size_t>(t) * 3 * C + h * s.HS + d];
        }
        bool finite = true;
        const double e_out = relative_l2(got_out, out_row, &finite);
        EXPECT_TRUE(finite);
        const double e_dq = relative_l2(got_dq, dq_row, &finite);
        EXPECT_TRUE(finite);
        std::printf("[ attention] T=16384 row t=%d h=%d %-14s out %.2e dq %.2e\n", t, h,
                    to_string(kernels[k]), e_out, e_dq);
        // Long rows: bf16 P (naive) and bf16 P V operands (flash) each cost ~1e-2 at most.
        EXPECT_LE(e_out, 5e-2) << to_string(kernels[k]) << " t=" << t << " h=" << h;
        EXPECT_LE(e_dq, 1e-1) << to_string(kernels[k]) << " t=" << t << " h=" << h;
      }
    }
  }
}

// Flash fp32 is fully deterministic; portable flash bf16 is, except dQ (fp32 atomics across key
// blocks); Hopper flash bf16 in deterministic mode is, dQ included (fixed-order additions).
TEST(GpuAttentionDeterminism, RepeatedRunsGiveIdenticalBits) {
  GPT2_REQUIRE_GPU();
  const AttentionShape s{2, 777, 4, 64, 1.0};
  const int C = s.NH * s.HS;
  const int64_t n_out = static_cast<int64_t>(s.B) * s.T * C;
  const std::vector<float> qkv = random_normal(3 * n_out, 5);
  const std::vector<float> dout = random_normal(n_out, 6);
  Context ctx;
  const AttentionKernel portable = AttentionKernel::kFlashPortable;
  const AttentionResult f32_a = run_attention<float>(portable, qkv, dout, s, ctx);
  const AttentionResult f32_b = run_attention<float>(portable, qkv, dout, s, ctx);
  EXPECT_EQ(f32_a.out, f32_b.out);
  EXPECT_EQ(f32_a.lse, f32_b.lse);
  EXPECT_EQ(f32_a.dqkv, f32_b.dqkv);
  const AttentionResult bf_a = run_attention<bf16>(portable, qkv, dout, s, ctx);
  const AttentionResult bf_b = run_attention<bf16>(portable, qkv, dout, s, ctx);
  EXPECT_EQ(bf_a.out, bf_b.out);
  EXPECT_EQ(bf_a.lse, bf_b.lse);
  // dK and dV (columns C..3C of each row) are written once from registers: identical.
  for (int64_t row = 0; row < static_cast<int64_t>(s.B) * s.T; ++row)
    for (int c = C; c < 3 * C; ++c)
      ASSERT_EQ(bf_a.dqkv[row * 3 * C + c], bf_b.dqkv[row * 3 * C + c]) << "row " << row << " c " << c;
}

TEST(GpuAttentionDeterminism, HopperDeterministicModeGivesIdenticalBits) {
  GPT2_REQUIRE_GPU();
  GPT2_REQUIRE_ATTENTION_KERNEL(bf16, AttentionKernel::kFlashHopper, 64);
  // Many key blocks add into each query tile's dQ: 2048 / 128 = 16 per (b, h) at the end; from
  // 8 key blocks on (every T here) the items walk their query tiles down.
  for (const AttentionShape s :
       {AttentionShape{2, 2048, 5, 64, 1.0}, AttentionShape{1, 1531, 3, 128, 1.0},
        AttentionShape{1, 4100, 3, 64, 1.0}, AttentionShape{1, 4100, 2, 128, 1.0}}) {
    const auto [qkv, dout] = random_inputs(s, 15);
    Context ctx;
    const AttentionResult a = run_attention<bf16>(AttentionKernel::kFlashHopper, qkv, dout, s, ctx);
    for (int repeat = 0; repeat < 3; ++repeat) {
      const AttentionResult b = run_attention<bf16>(AttentionKernel::kFlashHopper, qkv, dout, s, ctx);
      EXPECT_EQ(a.out, b.out) << describe(s);
      EXPECT_EQ(a.lse, b.lse) << describe(s);
      EXPECT_EQ(a.dqkv, b.dqkv) << describe(s) << " repeat " << repeat;
    }
  }
}

// The persistent Hopper backward with three blocks: 35 work items (7 key blocks x 5 heads), about
// 12 per block in turn, reusing K/V tiles, rings and barriers across items, in head groups of
// 2, 2 and 1 (the last smaller); both dQ orders against fp64, and the fixed order gives the
// same bits as with one block per SM (one group of all 5 heads).
TEST(GpuAttentionHopper, FewPersistentBlocksTakeManyItemsEach) {
  GPT2_REQUIRE_GPU();
  for (const int head_size : {64, 128}) {
    GPT2_REQUIRE_ATTENTION_KERNEL(bf16, AttentionKernel::kFlashHopper, head_size);
    const AttentionShape s{1, 777, 5, head_size, 1.0};
    for (const bool deterministic : {true, false}) {
      HopperKnobs knobs;
      knobs.deterministic = deterministic;
      knobs.racing_from_t = 1;
      knobs.backward_max_blocks = 3;
      check_attention<bf16>(AttentionKernel::kFlashHopper, s, 41, knobs);
    }
    const auto [qkv, dout] = random_inputs(s, 43);
    Context ctx;
    HopperKnobs three_blocks;
    three_blocks.backward_max_blocks = 3;
    const AttentionResult few =
        run_attention<bf16>(AttentionKernel::kFlashHopper, qkv, dout, s, ctx, three_blocks);
    const AttentionResult all =
        run_attention<bf16>(AttentionKernel::kFlashHopper, qkv, dout, s, ctx);
    EXPECT_EQ(few.dqkv, all.dqkv) << describe(s);
  }
}

// The persistent forward with three blocks (max_blocks forces it at any T): they share the 50
// to 180 items between them through the work queue (its counter in a poisoned workspace: the
// launcher zeroes it), each block's rings, barriers, item slots and consumers' turns running on
// from item to item, including items of one key tile; every shape with a producer against
// fp64, and the same bits as the launcher's own choice: at T = 777 the persistent kernel on as
// many blocks as the SMs hold, at T = 1100 (above the persistent_max_t it is given, 1024) the
// kernel of a block an item, without the queue (a row's arithmetic depends on neither the block
// that computes it nor the kernel).
TEST(GpuAttentionHopper, ForwardPersistentBlocksTakeManyItemsEach) {
  GPT2_REQUIRE_GPU();
  for (const int head_size : {64, 128}) {
    GPT2_REQUIRE_ATTENTION_KERNEL(bf16, AttentionKernel::kFlashHopper, head_size);
    for (const int T : {777, 1100}) {
      const AttentionShape s{2, T, 5, head_size, 1.0};
      const auto [qkv, dout] = random_inputs(s, 45);
      Context ctx;
      for (const HopperForwardShape shape : hopper_forward_shapes()) {
        if (shape == HopperForwardShape::kRows64NoProducer) continue;  // one item a block
        SCOPED_TRACE(str_cat("head size ", head_size, ", T ", T, ", ", to_string(shape)));
        HopperKnobs few, own;
        few.forward_shape = own.forward_shape = shape;
        few.forward_max_blocks = 3;
        own.forward_persistent_max_t = 1024;
        check_attention<bf16>(AttentionKernel::kFlashHopper, s, 47, few);
        const AttentionResult a = run_attention<bf16>(AttentionKernel::kFlashHopper, qkv, dout,
                                                      s, ctx, few);
        const AttentionResult b = run_attention<bf16>(AttentionKernel::kFlashHopper, qkv, dout,
                                                      s, ctx, own);
        EXPECT_EQ(a.out, b.out);
        EXPECT_EQ(a.lse, b.lse);
      }
    }
  }
}

// Forward block shapes that meet the same key tiles in the same order do the same arithmetic
// per row, so out and lse agree bit for bit: at head size 64 all three (128-key tiles); at 128
// the two 64-row shapes (64-key tiles; the 128-row shape tiles keys by 128 and agrees only to
// rounding, as checked above). At T = 1000 the shapes with a producer run persistent, at
// T = 1500 (above the persistent_max_t they are given, 1024) a block an item.
TEST(GpuAttentionHopper, ForwardBlockShapesOfTheSameTilesGiveIdenticalBits) {
  GPT2_REQUIRE_GPU();
  for (const int head_size : {64, 128}) {
    GPT2_REQUIRE_ATTENTION_KERNEL(bf16, AttentionKernel::kFlashHopper, head_size);
    for (const int T : {1000, 1500}) {
      const AttentionShape s{3, T, 5, head_size, 1.0};
      const auto [qkv, dout] = random_inputs(s, 51);
      Context ctx;
      HopperKnobs rows64, rows128, no_producer;
      for (HopperKnobs* knobs : {&rows64, &rows128, &no_producer})
        knobs->forward_persistent_max_t = 1024;
      rows64.forward_shape = HopperForwardShape::kRows64;
      rows128.forward_shape = HopperForwardShape::kRows128;
      no_producer.forward_shape = HopperForwardShape::kRows64NoProducer;
      std::vector<HopperKnobs> same_tiles = {no_producer};
      if (head_size == 64) same_tiles.push_back(rows128);
      const AttentionKernel hopper = AttentionKernel::kFlashHopper;
      const AttentionResult a = run_attention<bf16>(hopper, qkv, dout, s, ctx, rows64);
      for (const HopperKnobs& other : same_tiles) {
        const AttentionResult b = run_attention<bf16>(hopper, qkv, dout, s, ctx, other);
        const std::string what = str_cat("head size ", head_size, ", T ", T, ", forward ",
                                         to_string(other.forward_shape));
        EXPECT_EQ(a.out, b.out) << what;
        EXPECT_EQ(a.lse, b.lse) << what;
        EXPECT_EQ(a.dqkv, b.dqkv) << what;  // the same backward from the same out and lse
      }
    }
  }
}

}  // namespace
}  // namespace gpt2::gpu::test
