// The cuBLASLt algorithm choice by measurement (kernels/gpu/cublaslt_tuning.cuh).
// - device_bytes_hash against its CPU twin on random bytes, odd lengths and misaligned
//   pointers; one changed byte and two swapped words change it.
// - choose_algorithm on stand-in GEMMs (memsets of known cost and output): the fastest of the
//   candidates whose output matches the first runnable one's wins; a faster candidate with
//   other bits and a refused one are passed over; a GEMM that reads D leaves D as one run does;
//   tuning off, a capture, or an input it overwrites give the first runnable candidate.
// - The real GEMMs (bf16 matmul_forward, its GELU form, matmul_backward's +=, and FP8 with a
//   bias, GELU aux, fast accumulation and +=): a tuned Context's outputs bitwise an untuned
//   one's, on the first call of a shape and on the next.
// - GPT2_GEMM_TUNING: off turns it off, an unknown value is an error.
#include <cstdlib>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "kernels/gpu/cublaslt_tuning.cuh"
#include "kernels/gpu/matmul.cuh"
#include "kernels/gpu/matmul_fp8.cuh"

namespace gpt2::gpu::test {
namespace {

std::vector<unsigned char> random_bytes(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<unsigned char> bytes(n);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng.next_u64() & 0xFF);
  return bytes;
}

TEST(GpuCublasLtTuning, DeviceHashMatchesItsCpuTwin) {
  GPT2_REQUIRE_GPU();
  Context ctx;
  for (size_t n : {size_t(0), size_t(1), size_t(3), size_t(4), size_t(5), size_t(1023),
                   size_t(1 << 20) + 3}) {
    for (int64_t offset : {0, 1, 2}) {
      std::vector<unsigned char> host = random_bytes(n, 100 + n);
      DeviceBuffer<unsigned char> device(static_cast<int64_t>(n), offset);
      if (n) device.upload(host);
      const uint64_t expected = bytes_hash(host.data(), n);
      EXPECT_EQ(device_bytes_hash(device.get(), n, ctx.stream()), expected)
          << n << " bytes at offset " << offset;
      if (n < 8) continue;
      std::vector<unsigned char> changed = host;
      changed[n / 2] ^= 1;
      EXPECT_NE(bytes_hash(changed.data(), n), expected);
      std::vector<unsigned char> swapped = host;
      std::swap_ranges(swapped.begin(), swapped.begin() + 4, swapped.begin() + 4);
      if (std::memcmp(host.data(), host.data() + 4, 4) != 0) {
        EXPECT_NE(bytes_hash(swapped.data(), n), expected);
      }
    }
  }
}

// Stand-in GEMMs: candidate i writes D with memsets and spends time on a scratch buffer.
struct FakeCandidate {
  bool refused;
  unsigned char value;  // what D's first half is set to
  int slow_passes;      // memsets of the scratch buffer (the candidate's cost)
};

class FakeGemm {
 public:
  static constexpr size_t kBytes = 1 << 16;
  static constexpr size_t kScratchBytes = size_t(64) << 20;

  FakeGemm(const Context& ctx, std::vector<FakeCandidate> candidates, bool accumulates)
      : ctx_(ctx), candidates_(std::move(candidates)), accumulates_(accumulates),
        d_(kBytes), scratch_(kScratchBytes) {
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cublasLtMatmulAlgo_t algo{};
      algo.data[0] = i;
      algos_.push_back(algo);
    }
    std::vector<unsigned char> initial(kBytes);
    for (size_t i = 0; i < kBytes; ++i) initial[i] = static_cast<unsigned char>(i * 7);
    d_.upload(initial);
  }

  /// Without accumulation: D = value everywhere. With it: D's second half = D's first half,
  /// then the first half = value (two runs differ from one).
  GemmTrial trial() {
    GemmTrial t;
    t.launch = [this](const cublasLtMatmulAlgo_t& algo) {
      const FakeCandidate& c = candidates_[algo.data[0]];
      if (c.refused) return CUBLAS_STATUS_NOT_SUPPORTED;
      ++launches_;
      const cudaStream_t s = ctx_.stream();
      unsigned char* d = d_.get();
      if (accumulates_)
        GPT2_CUDA_CHECK(cudaMemcpyAsync(d + kBytes / 2, d, kBytes / 2, cudaMemcpyDeviceToDevice,
                                        s));
      GPT2_CUDA_CHECK(cudaMemsetAsync(d, c.value, accumulates_ ? kBytes / 2 : kBytes, s));
      for (int p = 0; p < c.slow_passes; ++p)
        GPT2_CUDA_CHECK(cudaMemsetAsync(scratch_.get(), p, kScratchBytes, s));
      return CUBLAS_STATUS_SUCCESS;
    };
    t.outputs = {{d_.get(), kBytes}};
    if (accumulates_) {
      t.accumulated = d_.get();
      t.accumulated_bytes = kBytes;
    }
    return t;
  }
  const std::vector<cublasLtMatmulAlgo_t>& algos() const { return algos_; }
  std::vector<unsigned char> d() const { return d_.download(); }
  int launches() const { return launches_; }

 private:
  const Context& ctx_;
  std::vector<FakeCandidate> candidates_;
  std::vector<cublasLtMatmulAlgo_t> algos_;
  bool accumulates_;
  DeviceBuffer<unsigned char> d_, scratch_;
  int launches_ = 0;
};

// 0 and 2 are refused, 1 is the first that runs, 3 the fastest but writes other bits, 4 the
// fastest of the rest.
const std::vector<FakeCandidate> kCandidates = {
    {true, 0, 0}, {false, 0x11, 40}, {true, 0, 0}, {false, 0x22, 0}, {false, 0x11, 2},
    {false, 0x11, 20}};

void expect_d(const std::vector<unsigned char>& d, unsigned char first, unsigned char second) {
  for (size_t i = 0; i < d.size(); ++i) {
    const unsigned char want = i < d.size() / 2 ? first : second;
    if (d[i] != want) {
      ADD_FAILURE() << "D[" << i << "] = " << int(d[i]) << ", expected " << int(want);
      return;
    }
  }
}

TEST(GpuCublasLtTuning, ChoosesTheFastestCandidateWithTheFirstsBits) {
  GPT2_REQUIRE_GPU();
  Context ctx;
  ctx.set_gemm_tuning(true);
  FakeGemm gemm(ctx, kCandidates, /*accumulates=*/false);
  EXPECT_EQ(choose_algorithm(ctx, gemm.algos(), gemm.trial()), 4u);
  expect_d(gemm.d(), 0x11, 0x11);
  EXPECT_GT(gemm.launches(), 4) << "every runnable candidate ran at least once";
}

TEST(GpuCublasLtTuning, AccumulatingGemmLeavesDAsOneRunDoes) {
  GPT2_REQUIRE_GPU();
  Context ctx;
  ctx.set_gemm_tuning(true);
  FakeGemm gemm(ctx, kCandidates, /*accumulates=*/true);
  const std::vector<unsigned char> before = gemm.d();
  EXPECT_EQ(choose_algorithm(ctx, gemm.algos(), gemm.trial()), 4u);
  const std::vector<unsigned char> after = gemm.d();
  // One run: the first half 0x11, the second half the first half as it was.
  expect_d(std::vector<unsigned char>(after.begin(), after.begin() + after.size() / 2), 0x11,
           0x11);
  EXPECT_EQ(std::memcmp(after.data() + after.size() / 2, before.data(), after.size() / 2), 0)
      << "D was run more than once without being restored";
}

TEST(GpuCublasLtTuning, FirstRunnableCandidateWhenNotTuning) {
  GPT2_REQUIRE_GPU();
  Context ctx;
  {  // tuning off
    ctx.set_gemm_tuning(false);
    FakeGemm gemm(ctx, kCandidates, false);
    EXPECT_EQ(choose_algorithm(ctx, gemm.algos(), gemm.trial()), 1u);
    EXPECT_EQ(gemm.launches(), 1);
    expect_d(gemm.d(), 0x11, 0x11);
  }
  ctx.set_gemm_tuning(true);
  {  // a GEMM that overwrites one of its inputs
    FakeGemm gemm(ctx, kCandidates, false);
    GemmTrial trial = gemm.trial();
    trial.repeatable = false;
    EXPECT_EQ(choose_algorithm(ctx, gemm.algos(), trial), 1u);
    EXPECT_EQ(gemm.launches(), 1);
  }
  {  // inside a graph capture: queued once, nothing timed
    FakeGemm gemm(ctx, kCandidates, false);
    const GemmTrial trial = gemm.trial();
    GPT2_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeThreadLocal));
    const size_t chosen = choose_algorithm(ctx, gemm.algos(), trial);
    cudaGraph_t graph = nullptr;
    GPT2_CUDA_CHECK(cudaStreamEndCapture(ctx.stream(), &graph));
    GPT2_CUDA_CHECK(cudaGraphDestroy(graph));
    EXPECT_EQ(chosen, 1u);
    EXPECT_EQ(gemm.launches(), 1);
  }
  {  // nothing runs
    FakeGemm gemm(ctx, {{true, 0, 0}, {true, 0, 0}}, false);
    EXPECT_EQ(choose_algorithm(ctx, gemm.algos(), gemm.trial()), 2u);
    EXPECT_EQ(gemm.launches(), 0);
  }
}

// ---------------------------------------------------------------------------------------------
// The real GEMMs: tuned and untuned Contexts give the same bytes.

template <typename Elem>
void upload_random(DeviceBuffer<Elem>& buffer, uint64_t seed, double scale) {
  upload_floats(buffer, random_normal(buffer.size(), seed, scale));
}

/// FP8 codes of modest magnitude, finite in E4M3 and E5M2 (exponent field < 8).
void upload_codes(DeviceBuffer<uint8_t>& buffer, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> codes(static_cast<size_t>(buffer.size()));
  for (auto& c : codes) c = static_cast<uint8_t>(rng.next_u64() & 0xBF);
  buffer.upload(codes);
}

struct TwoContexts {
  Context tuned, plain;
  TwoContexts() {
    tuned.set_gemm_tuning(true);
    plain.set_gemm_tuning(false);
  }
};

TEST(GpuCublasLtTuning, Bf16GemmsAreBitwiseTheUntunedOnes) {
  GPT2_REQUIRE_GPU();
  TwoContexts contexts;
  const int B = 2, T = 1000, C = 768, OC = 3072;  // odd rows: B*T = 2000
  const int64_t BT = int64_t(B) * T;
  DeviceBuffer<bf16> inp(BT * C), weight(int64_t(OC) * C), bias(OC), dout(BT * OC);
  upload_random(inp, 1, 1.0);
  upload_random(weight, 2, 0.02);
  upload_random(bias, 3, 0.02);
  upload_random(dout, 4, 1e-3);
  DeviceBuffer<float> scratch(matmul_backward_scratch_floats(B, T, OC));
  for (int call = 0; call < 2; ++call) {
    std::vector<std::vector<unsigned char>> outputs[2];
    for (int which = 0; which < 2; ++which) {
      const Context& ctx = which == 0 ? contexts.tuned : contexts.plain;
      DeviceBuffer<bf16> out(BT * OC), pre(BT * OC), dinp(BT * C), dweight(int64_t(OC) * C);
      upload_random(dweight, 5, 0.01);  // += onto values
      matmul_forward(out.get(), inp.get(), weight.get(), bias.get(), B, T, C, OC, ctx);
      outputs[which].push_back(out.download_bytes());
      matmul_forward_gelu(out.get(), pre.get(), inp.get(), weight.get(), bias.get(), B, T, C, OC,
                          ctx);
      outputs[which].push_back(out.download_bytes());
      outputs[which].push_back(pre.download_bytes());
      matmul_backward<bf16>(dinp.get(), dweight.get(), nullptr, dout.get(), inp.get(),
                            weight.get(), B, T, C, OC, scratch.get(), ctx);
      outputs[which].push_back(dinp.download_bytes());
      outputs[which].push_back(dweight.download_bytes());
    }
    const char* names[] = {"forward", "forward GELU", "pre-GELU", "dinp", "dweight +="};
    for (size_t i = 0; i < outputs[0].size(); ++i)
      EXPECT_TRUE(outputs[0][i] == outputs[1][i]) << names[i] << " differs, call " << call;
  }
}

TEST(GpuCublasLtTuning, Fp8GemmsAreBitwiseTheUntunedOnes) {
  GPT2_REQUIRE_FP8_GPU();
  TwoContexts contexts;
  const int M = 2000, N = 3072, K = 768;
  DeviceBuffer<uint8_t> a(int64_t(M) * K), b(int64_t(N) * K), a_t(int64_t(K) * M),
      n_t(int64_t(K) * N);
  upload_codes(a, 11);
  upload_codes(b, 12);
  upload_codes(a_t, 13);
  upload_codes(n_t, 14);
  DeviceBuffer<float> scales(8);  // 1 / scale of each operand, each on its 16 bytes
  scales.upload({1.f / 64, 0, 0, 0, 1.f / 16, 0, 0, 0});
  const Fp8Operand x{a.get(), cpu::Fp8Format::kE4M3, scales.get()};
  const Fp8Operand w{b.get(), cpu::Fp8Format::kE4M3, scales.get() + 4};
  const Fp8Operand dy_t{n_t.get(), cpu::Fp8Format::kE5M2, scales.get()};
  const Fp8Operand x_t{a_t.get(), cpu::Fp8Format::kE4M3, scales.get() + 4};
  DeviceBuffer<bf16> bias(N);
  upload_random(bias, 15, 0.1);
  for (int call = 0; call < 2; ++call) {
    std::vector<std::vector<unsigned char>> outputs[2];
    for (int which = 0; which < 2; ++which) {
      const Context& ctx = which == 0 ? contexts.tuned : contexts.plain;
      DeviceBuffer<bf16> out(int64_t(M) * N), aux(int64_t(M) * N), dw(int64_t(N) * M);
      upload_random(dw, 16, 1.0);
      Fp8Epilogue forward;
      forward.bias = bias.get();
      forward.fast_accumulation = true;
      matmul_fp8(out.get(), x, w, M, N, K, forward, ctx);
      outputs[which].push_back(out.download_bytes());
      Fp8Epilogue gelu;
      gelu.bias = bias.get();
      gelu.gelu_aux = aux.get();
      if (try_matmul_fp8(out.get(), x, w, M, N, K, gelu, ctx)) {
        outputs[which].push_back(out.download_bytes());
        outputs[which].push_back(aux.download_bytes());
      }
      // The weight gradient's shape: (N, M) += dy^T (N, K) x^T (M, K)^T.
      matmul_fp8(dw.get(), dy_t, x_t, nullptr, N, M, K, ctx, /*accumulate=*/true);
      outputs[which].push_back(dw.download_bytes());
    }
    ASSERT_EQ(outputs[0].size(), outputs[1].size());
    for (size_t i = 0; i < outputs[0].size(); ++i)
      EXPECT_TRUE(outputs[0][i] == outputs[1][i]) << "output " << i << " differs, call " << call;
  }
}

TEST(GpuCublasLtTuning, EnvironmentTurnsItOffOrIsRefused) {
  GPT2_REQUIRE_GPU();
  const char* old = std::getenv("GPT2_GEMM_TUNING");
  const std::string saved = old ? old : "";
  setenv("GPT2_GEMM_TUNING", "off", 1);
  EXPECT_FALSE(Context().gemm_tuning());
  setenv("GPT2_GEMM_TUNING", "on", 1);
  EXPECT_TRUE(Context().gemm_tuning());
  setenv("GPT2_GEMM_TUNING", "fast", 1);
  EXPECT_THROW(Context(), Error);
  if (old)
    setenv("GPT2_GEMM_TUNING", saved.c_str(), 1);
  else
    unsetenv("GPT2_GEMM_TUNING");
}

}  // namespace
}  // namespace gpt2::gpu::test
