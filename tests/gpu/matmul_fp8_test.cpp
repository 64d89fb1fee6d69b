// gpu::matmul_fp8 (kernels/gpu/matmul_fp8.cuh) against the fp64 product of its dequantized
// operands: codes cast on the host (cpu::fp8_cast_transpose, with delayed power-of-two scales),
// the reference decodes them, multiplies by the inverse scales and sums in double. The bound
// per element, from the formats: the products of two FP8 values are exact in fp32 and the
// sum is not kept in full fp32: Hopper's FP8 tensor cores keep about 14 bits while they add
// products (DeepSeek-V3, section 3.3.2), and cuBLASLt (fast accumulation off) moves partial
// sums to fp32 as it goes. On an H200 the errors seen reached about 2^-14 sum_k |a_k b_k| at
// K <= 768 and grew no faster than a K-term fp32 sum's K 2^-24 beyond, so the bound takes
// max(2^-13, K 2^-24) sum_k |a_k b_k|, plus the output's rounding to bf16 (within 2^-9 |ref|,
// taken as 2^-8); the bias, and out's old value when accumulating, may be added after the
// product is rounded, so the bf16 term covers them too. A wrong layout, scale or format gives
// errors of the order of the values themselves.
// E4M3 x E4M3 (the forward), E5M2 x E4M3 and E4M3 x E5M2 (the backward's gradient operands),
// with and without the bias, at small, odd-M and model shapes, and the weight gradient's +=
// (out holding bf16 values first). Each case reports its own failure (a refused shape
// included). Fast accumulation (the forward's, --fp8-fast-accumulation) has no moves to fp32:
// its bound takes the 14 bits kept at each of the ceil(K / 32) MMA steps that add into the
// sum, ceil(K / 32) 2^-14 sum_k |a_k b_k|, and the test prints the worst error against it.
// Skips without an FP8-capable GPU (sm_89+).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/fp8.h"
#include "kernels/gpu/context.cuh"
#include "kernels/gpu/matmul_fp8.cuh"

namespace gpt2::gpu::test {
namespace {

using cpu::Fp8Format;

// A tensor cast as the FP8 path casts it: its codes and the inverse of its scale.
struct Cast {
  std::vector<uint8_t> codes;
  float inverse = 1.0f;
};

Cast cast(const std::vector<float>& values, int64_t rows, int64_t cols, Fp8Format format) {
  float amax = 0.0f;
  cpu::fp8_cast_transpose(values.data(), rows, cols, 1.0f, format, nullptr, nullptr, &amax);
  cpu::Fp8Scale scale(format, 1);
  scale.record(amax);
  Cast c;
  c.codes.resize(static_cast<size_t>(rows * cols));
  cpu::fp8_cast_transpose(values.data(), rows, cols, scale.scale(), format, c.codes.data(),
                          nullptr, nullptr);
  c.inverse = scale.inverse();
  return c;
}

enum class Epilogue { kNone, kBias, kAccumulate, kGelu, kDgelu };

const char* to_string(Epilogue e) {
  switch (e) {
    case Epilogue::kNone: return "";
    case Epilogue::kBias: return " + bias";
    case Epilogue::kAccumulate: return " accumulated";
    case Epilogue::kGelu: return " + bias, GELU";
    case Epilogue::kDgelu: return " DGELU";
  }
  return "";
}

// tanh GELU and its derivative in double (kernels/cpu/gelu.cpp's formula).
double gelu(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}
double gelu_derivative(double x) {
  const double c = std::sqrt(2.0 / M_PI), u = c * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

// The accumulation's share of an element's bound (the file's comment), from sum_k |a_k b_k|.
double accumulation_bound(int K, bool fast, double magnitude) {
  const double per_magnitude =
      fast ? ((K + 31) / 32) * 0x1p-14 : std::max(0x1p-13, K * 0x1p-24);
  return per_magnitude * magnitude + 1e-30;
}

// The fp64 products of the dequantized operands, (M, N): each sum_k a_k b_k and sum_k |a_k b_k|.
struct Reference {
  std::vector<double> sum, magnitude;
};

Reference reference_products(const Cast& a, Fp8Format a_format, const Cast& b,
                             Fp8Format b_format, int M, int N, int K) {
  auto dequantized = [](const Cast& c, Fp8Format format) {
    std::vector<double> values(c.codes.size());
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = double(cpu::fp8_decode(c.codes[i], format)) * c.inverse;
    return values;
  };
  const std::vector<double> av = dequantized(a, a_format), bv = dequantized(b, b_format);
  Reference ref;
  ref.sum.resize(static_cast<size_t>(M) * N);
  ref.magnitude.resize(ref.sum.size());
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      const double* arow = av.data() + static_cast<size_t>(m) * K;
      const double* brow = bv.data() + static_cast<size_t>(n) * K;
      double sum = 0.0, magnitude = 0.0;
      for (int k = 0; k < K; ++k) {
        sum += arow[k] * brow[k];
        magnitude += std::fabs(arow[k] * brow[k]);
      }
      ref.sum[static_cast<size_t>(m) * N + n] = sum;
      ref.magnitude[static_cast<size_t>(m) * N + n] = magnitude;
    }
  }
  return ref;
}

// One GEMM with `epilogue` against the fp64 product of its dequantized operands. GELU's
// output is checked against gelu of the reference within 1.13 (GELU's largest slope) times the
// product's bound plus a bf16 rounding, its aux output against the product + bias; DGELU's
// within max |gelu'| = 1.13 times the product's bound plus two bf16 roundings (the product is
// rounded before the epilogue scales it: measured up to 0.7% at K = 3072). false when
// cuBLASLt offers no algorithm for the epilogue (printed, not a failure: the model falls back).
bool check_fp8_gemm(int M, int N, int K, Fp8Format a_format, Fp8Format b_format,
                    Epilogue epilogue, uint64_t seed, bool fast = false) {
  const char* accumulation_name = fast ? ", fast accumulation" : "";
  SCOPED_TRACE(str_cat("M=", M, " N=", N, " K=", K, " ", cpu::to_string(a_format), " x ",
                       cpu::to_string(b_format), to_string(epilogue), accumulation_name));
  const bool bias = epilogue == Epilogue::kBias || epilogue == Epilogue::kGelu;
  const bool accumulate = epilogue == Epilogue::kAccumulate;
  const std::vector<float> x = random_normal(int64_t{M} * K, seed, 2.0);
  const std::vector<float> w = random_normal(int64_t{N} * K, seed + 1, 0.05);
  const std::vector<float> bias_values = round_through<bf16>(random_normal(N, seed + 2, 0.1));
  const Cast a = cast(x, M, K, a_format);
  const Cast b = cast(w, N, K, b_format);
  Context ctx;
  DeviceBuffer<uint8_t> d_a(int64_t{M} * K), d_b(int64_t{N} * K);
  DeviceBuffer<float> d_inverse(8);  // the two scales 16 bytes apart, as cuBLASLt needs
  DeviceBuffer<bf16> d_bias(N), d_out(int64_t{M} * N), d_aux(int64_t{M} * N);
  d_a.upload(a.codes);
  d_b.upload(b.codes);
  d_inverse.upload({a.inverse, 0.f, 0.f, 0.f, b.inverse, 0.f, 0.f, 0.f});
  upload_floats(d_bias, bias_values);
  // Accumulating: out starts as bf16 values the product is added to; DGELU reads pre-GELU
  // values from aux; otherwise both start as NaNs.
  const std::vector<float> initial =
      round_through<bf16>(random_normal(int64_t{M} * N, seed + 3, 1.0));
  if (accumulate)
    upload_floats(d_out, initial);
  else
    d_out.poison();
  if (epilogue == Epilogue::kDgelu)
    upload_floats(d_aux, initial);
  else
    d_aux.poison();
  Fp8Epilogue e;
  e.bias = bias ? d_bias.get() : nullptr;
  e.accumulate = accumulate;
  e.gelu_aux = epilogue == Epilogue::kGelu ? d_aux.get() : nullptr;
  e.dgelu_aux = epilogue == Epilogue::kDgelu ? d_aux.get() : nullptr;
  e.fast_accumulation = fast;
  try {
    if (!try_matmul_fp8(d_out.get(), Fp8Operand{d_a.get(), a_format, d_inverse.get()},
                        Fp8Operand{d_b.get(), b_format, d_inverse.get() + 4}, M, N, K, e, ctx)) {
      std::printf("[ fp8 gemm ] M=%d N=%d K=%d %s x %s%s: cuBLASLt offers no algorithm\n", M, N,
                  K, cpu::to_string(a_format), cpu::to_string(b_format), to_string(epilogue));
      return false;
    }
    ctx.synchronize();
  } catch (const Error& error) {
    ADD_FAILURE() << error.what();
    return false;
  }
  const std::vector<float> got = download_floats(d_out), got_aux = download_floats(d_aux);
  const Reference ref = reference_products(a, a_format, b, b_format, M, N, K);
  int64_t bad = 0;
  double worst = 0.0;
  auto check = [&](const char* what, size_t i, double value, double want, double allowed) {
    const double error = std::fabs(value - want);
    worst = std::max(worst, error / allowed);
    if (!(error <= allowed) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "] = " << value << ", fp64 " << want << ", allowed "
                    << allowed;
  };
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      const size_t i = static_cast<size_t>(m) * N + n;
      const double sum = ref.sum[i], magnitude = ref.magnitude[i];
      const double added = (bias ? bias_values[static_cast<size_t>(n)] : 0.0) +
                           (accumulate ? initial[i] : 0.0);
      const double accumulation = accumulation_bound(K, fast, magnitude);
      const double pre = sum + added;
      const double pre_allowed = 0x1p-8 * (std::fabs(pre) + std::fabs(added)) + accumulation;
      if (epilogue == Epilogue::kGelu) {
        check("aux", i, got_aux[i], pre, pre_allowed);
        check("out", i, got[i], gelu(pre), 1.13 * pre_allowed + 0x1p-8 * std::fabs(gelu(pre)));
      } else if (epilogue == Epilogue::kDgelu) {
        const double want = gelu_derivative(initial[i]) * sum;
        check("out", i, got[i], want, 1.13 * accumulation + 0x1p-7 * std::fabs(want));
      } else {
        check("out", i, got[i], pre, pre_allowed);
      }
    }
  }
  std::printf("[ fp8 gemm ] M=%d N=%d K=%d %s x %s%s%s: worst error / bound %.3f\n", M, N, K,
              cpu::to_string(a_format), cpu::to_string(b_format), to_string(epilogue),
              accumulation_name, worst);
  EXPECT_EQ(bad, 0);
  return true;
}

TEST(GpuMatmulFp8, MatchesTheFp64ProductOfItsDequantizedOperands) {
  GPT2_REQUIRE_FP8_GPU();
  const Fp8Format e4 = Fp8Format::kE4M3, e5 = Fp8Format::kE5M2;
  uint64_t seed = 10;
  for (const auto& [a_format, b_format] : {std::pair{e4, e4}, std::pair{e5, e4},
                                          std::pair{e4, e5}}) {
    check_fp8_gemm(1, 16, 16, a_format, b_format, Epilogue::kNone, ++seed);
    check_fp8_gemm(16, 16, 16, a_format, b_format, Epilogue::kNone, ++seed);
    check_fp8_gemm(37, 48, 64, a_format, b_format, Epilogue::kBias, ++seed);
    check_fp8_gemm(128, 768, 768, a_format, b_format, Epilogue::kBias, ++seed);
    check_fp8_gemm(300, 2304, 768, a_format, b_format, Epilogue::kNone, ++seed);
  }
  // The weight gradient's shape and +=: dW (OC, IC) += dY^T X, K = B*T.
  check_fp8_gemm(768, 256, 4096, e5, e4, Epilogue::kAccumulate, ++seed);
  check_fp8_gemm(64, 48, 1024, e5, e4, Epilogue::kNone, ++seed);
}

// The fc layer's fused forms: GELU with its aux output (E4M3 x E4M3), DGELU (E5M2 x E4M3).
// cuBLASLt may not pair them with FP8 operands; then the model runs the GELU kernels after
// the GEMM, and this test says so.
TEST(GpuMatmulFp8, GeluEpiloguesMatchTheFp64Reference) {
  GPT2_REQUIRE_FP8_GPU();
  const Fp8Format e4 = Fp8Format::kE4M3, e5 = Fp8Format::kE5M2;
  check_fp8_gemm(128, 3072, 768, e4, e4, Epilogue::kGelu, 41);
  check_fp8_gemm(37, 64, 256, e4, e4, Epilogue::kGelu, 42);
  check_fp8_gemm(128, 768, 3072, e5, e4, Epilogue::kDgelu, 43);
}

// The forward's GEMMs with fast accumulation (--fp8-fast-accumulation): E4M3 x E4M3 at the
// block linears' shapes (K up to gpt2-large's 4C = 5120) with the bias and fc's GELU, within
// the fast bound.
TEST(GpuMatmulFp8, FastAccumulationStaysWithinItsBound) {
  GPT2_REQUIRE_FP8_GPU();
  const Fp8Format e4 = Fp8Format::kE4M3;
  uint64_t seed = 60;
  check_fp8_gemm(37, 48, 64, e4, e4, Epilogue::kBias, ++seed, /*fast=*/true);
  check_fp8_gemm(128, 768, 768, e4, e4, Epilogue::kBias, ++seed, true);
  check_fp8_gemm(300, 2304, 768, e4, e4, Epilogue::kNone, ++seed, true);
  check_fp8_gemm(64, 1024, 4096, e4, e4, Epilogue::kBias, ++seed, true);
  check_fp8_gemm(64, 1280, 5120, e4, e4, Epilogue::kBias, ++seed, true);
  check_fp8_gemm(128, 3072, 768, e4, e4, Epilogue::kGelu, ++seed, true);
}

TEST(GpuMatmulFp8, ShapesAndFormatsItCannotTakeAreRefused) {
  GPT2_REQUIRE_FP8_GPU();
  Context ctx;
  DeviceBuffer<uint8_t> codes(64 * 64);
  DeviceBuffer<float> inverse(2);
  DeviceBuffer<bf16> out(64 * 64);
  const Fp8Operand e4{codes.get(), Fp8Format::kE4M3, inverse.get()};
  const Fp8Operand e5{codes.get(), Fp8Format::kE5M2, inverse.get()};
  EXPECT_THROW(matmul_fp8(out.get(), e5, e5, nullptr, 64, 64, 64, ctx), Error);
  EXPECT_THROW(matmul_fp8(out.get(), e4, e4, nullptr, 64, 64, 40, ctx), Error);  // K % 16
  EXPECT_THROW(matmul_fp8(out.get(), e4, e4, nullptr, 64, 40, 64, ctx), Error);  // N % 16
  const Fp8Operand e4_off{codes.get(), Fp8Format::kE4M3, inverse.get() + 1};  // 4-byte aligned
  EXPECT_THROW(matmul_fp8(out.get(), e4, e4_off, nullptr, 64, 64, 64, ctx), Error);
}

}  // namespace
}  // namespace gpt2::gpu::test
