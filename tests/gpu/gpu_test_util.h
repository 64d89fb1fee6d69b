/**
 * @file gpu_test_util.h
 * @brief Shared helpers of the GPU op tests: GPU-or-skip, device buffers, bf16 on the host,
 *        seeded inputs, and an element-by-element comparison that reports its errors.
 *
 * Every GPU test starts with GPT2_REQUIRE_GPU(), which GTEST_SKIPs with the probe's reason when
 * no usable GPU is present. Inputs are drawn from gpt2::Rng with fixed seeds and rounded
 * through the storage type first (round_through<T_>), so the CPU reference and the GPU see the
 * very same values. Outputs are poisoned with NaN bytes (0xFF.., a NaN in fp32 and in bf16)
 * before each launch, so an element the kernel forgot to write fails the comparison.
 * expect_close() checks |got - expected| <= allowed[i] for every element and prints one line
 * per comparison (max abs/rel error, worst allowed ratio) plus the first mismatches.
 * bf16 conversions on the host are base/bf16.h's (bit by bit, round-to-nearest-even
 * like __float2bfloat16_rn), so the tests need no CUDA device code.
 */
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "base/bf16.h"
#include "base/error.h"
#include "base/rng.h"
#include "kernels/gpu/context.cuh"
#include "model/config.h"

#define GPT2_REQUIRE_GPU()                                            \
  do {                                                                \
    std::string gpt2_why_;                                            \
    if (!::gpt2::gpu::gpu_available(&gpt2_why_))                      \
      GTEST_SKIP() << "no usable GPU: " << gpt2_why_;                 \
  } while (0)

/// GPT2_REQUIRE_GPU, and FP8 tensor cores (sm_89 or newer) on it.
#define GPT2_REQUIRE_FP8_GPU()                                        \
  do {                                                                \
    GPT2_REQUIRE_GPU();                                               \
    std::string gpt2_why_;                                            \
    if (!::gpt2::gpu::test::fp8_gpu(&gpt2_why_)) GTEST_SKIP() << gpt2_why_; \
  } while (0)

namespace gpt2::gpu::test {

/// sqrt(sum (got - ref)^2 / sum ref^2) over n elements, in double.
inline double rel_l2(const float* got, const float* ref, size_t n) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    diff += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    norm += double(ref[i]) * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

/// Whether the current device has FP8 tensor cores (sm_89 or newer); why not, when not.
inline bool fp8_gpu(std::string* why) {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    *why = "no CUDA device";
    return false;
  }
  if (prop.major * 10 + prop.minor < 89) {
    *why = str_cat(prop.name, " is sm_", prop.major, prop.minor, "; FP8 needs sm_89 or newer");
    return false;
  }
  return true;
}

using bf16 = __nv_bfloat16;

// ---------------------------------------------------------------------------------------------
// bf16 on the host

inline uint16_t bf16_bits(__nv_bfloat16 value) {
  const __nv_bfloat16_raw raw = value;
  return raw.x;
}

template <typename T_>
struct Storage;

template <>
struct Storage<float> {
  static constexpr const char* kName = "fp32";
  static constexpr double kUnitRoundoff = 0x1p-24;  // 24 significand bits: |round(x) - x| <= u |x|
  static float from_float(float x) { return x; }
  static float to_float(float x) { return x; }
};

template <>
struct Storage<bf16> {
  static constexpr const char* kName = "bf16";
  static constexpr double kUnitRoundoff = 0x1p-8;  // 8 significand bits (7 stored)
  static bf16 from_float(float x) {
    __nv_bfloat16_raw raw;
    raw.x = float_to_bf16_bits(x);
    return bf16(raw);
  }
  static float to_float(bf16 x) { return bf16_bits_to_float(bf16_bits(x)); }
};

/// Unit roundoff of fp32, the accumulation type of every kernel.
constexpr double kFp32Roundoff = 0x1p-24;

/// Typed tests run once per storage type, named fp32 / bf16.
using StorageTypes = ::testing::Types<float, bf16>;
struct StorageName {
  template <typename T_>
  static std::string GetName(int) {
    return Storage<T_>::kName;
  }
};

/// x rounded to T_ and back (identity for float).
template <typename T_>
std::vector<float> round_through(std::vector<float> values) {
  for (float& x : values) x = Storage<T_>::to_float(Storage<T_>::from_float(x));
  return values;
}

template <typename T_>
std::vector<T_> to_storage(const std::vector<float>& values) {
  std::vector<T_> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = Storage<T_>::from_float(values[i]);
  return out;
}

template <typename T_>
std::vector<float> to_floats(const std::vector<T_>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = Storage<T_>::to_float(values[i]);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Device buffers

/// Owns `count` elements of Elem on the device (plus `offset` leading elements, so tests can
/// hand kernels deliberately misaligned pointers).
template <typename Elem>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int64_t count, int64_t offset = 0) : count_(count), offset_(offset) {
    GPT2_CUDA_CHECK(cudaMalloc(&base_, static_cast<size_t>(std::max<int64_t>(count + offset, 1)) *
                                           sizeof(Elem)));
  }
  ~DeviceBuffer() { GPT2_CUDA_CHECK_NOTHROW(cudaFree(base_)); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  Elem* get() const { return base_ + offset_; }
  int64_t size() const { return count_; }

  void upload(const std::vector<Elem>& host) {
    GPT2_CHECK(static_cast<int64_t>(host.size()) == count_);
    GPT2_CUDA_CHECK(cudaMemcpy(get(), host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<Elem> download() const {
    std::vector<Elem> host(static_cast<size_t>(count_));
    GPT2_CUDA_CHECK(cudaDeviceSynchronize());
    GPT2_CUDA_CHECK(cudaMemcpy(host.data(), get(), bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  /// Raw bytes, for bitwise comparisons.
  std::vector<unsigned char> download_bytes() const {
    std::vector<unsigned char> host(bytes());
    GPT2_CUDA_CHECK(cudaDeviceSynchronize());
    GPT2_CUDA_CHECK(cudaMemcpy(host.data(), get(), bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  /// All bytes 0xFF: NaN in fp32 and bf16.
  void poison() { GPT2_CUDA_CHECK(cudaMemset(get(), 0xFF, bytes())); }

 private:
  size_t bytes() const { return static_cast<size_t>(count_) * sizeof(Elem); }
  Elem* base_ = nullptr;
  int64_t count_;
  int64_t offset_;
};

/// A T_ device buffer filled from floats (rounded to T_).
template <typename T_>
void upload_floats(DeviceBuffer<T_>& buffer, const std::vector<float>& values) {
  buffer.upload(to_storage<T_>(values));
}

template <typename T_>
std::vector<float> download_floats(const DeviceBuffer<T_>& buffer) {
  return to_floats(buffer.download());
}

// ---------------------------------------------------------------------------------------------
// Inputs

inline std::vector<float> random_normal(int64_t count, uint64_t seed, double scale = 1.0,
                                        double mean = 0.0) {
  Rng rng(seed);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& x : values) x = static_cast<float>(mean + scale * rng.normal());
  return values;
}

inline std::vector<int> random_ints(int64_t count, int upper, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> values(static_cast<size_t>(count));
  for (int& x : values) x = static_cast<int>(rng.uniform_int(static_cast<uint64_t>(upper)));
  return values;
}

inline std::vector<float> abs_values(std::vector<float> values) {
  for (float& x : values) x = std::fabs(x);
  return values;
}

// ---------------------------------------------------------------------------------------------
// Comparison

/// allowed[i] = atol + rtol * |expected[i]|.
inline std::vector<double> allowed_error(const std::vector<float>& expected, double atol,
                                         double rtol) {
  std::vector<double> allowed(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) allowed[i] = atol + rtol * std::fabs(expected[i]);
  return allowed;
}

/// Adds coefficient * magnitude[i] to allowed[i] (magnitude: e.g. the sum of |terms|).
inline void add_allowed(std::vector<double>& allowed, const std::vector<float>& magnitude,
                        double coefficient) {
  for (size_t i = 0; i < allowed.size(); ++i) allowed[i] += coefficient * std::fabs(magnitude[i]);
}

/// Every |got[i] - expected[i]| <= allowed[i] (a NaN in got fails). Prints a summary line and,
/// on failure, the first mismatches.
inline ::testing::AssertionResult expect_close(const std::string& what,
                                               const std::vector<float>& got,
                                               const std::vector<float>& expected,
                                               const std::vector<double>& allowed) {
  if (got.size() != expected.size() || allowed.size() != expected.size())
    return ::testing::AssertionFailure()
           << what << ": sizes differ (got " << got.size() << ", expected " << expected.size()
           << ", allowed " << allowed.size() << ")";
  double max_abs = 0.0, max_rel = 0.0, worst_ratio = 0.0;
  int64_t mismatches = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - expected[i]);
    const bool ok = !std::isnan(got[i]) && err <= allowed[i];
    if (!std::isnan(err)) {
      max_abs = std::max(max_abs, err);
      const double magnitude = std::fabs(static_cast<double>(expected[i]));
      max_rel = std::max(max_rel, err / std::max(magnitude, 1e-30));
      if (allowed[i] > 0) worst_ratio = std::max(worst_ratio, err / allowed[i]);
    }
    if (!ok) {
      if (mismatches < 8) {
        char line[200];
        std::snprintf(line, sizeof line,
                      "\n    [%zu] got %.9g expected %.9g |err| %.3g allowed %.3g", i, got[i],
                      expected[i], err, allowed[i]);
        first += line;
      }
      ++mismatches;
    }
  }
  std::printf("[ compare  ] %-44s n=%-8zu max_abs=%.3g max_rel=%.3g err/allowed<=%.3f%s\n",
              what.c_str(), got.size(), max_abs, max_rel, worst_ratio,
              mismatches ? "  MISMATCH" : "");
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << mismatches << " of " << got.size()
         << " elements outside tolerance (max_abs " << max_abs << ", max_rel " << max_rel
         << "); first:" << first;
}

/// Bitwise equality of two downloads (determinism checks).
inline ::testing::AssertionResult bitwise_equal(const std::string& what,
                                                const std::vector<unsigned char>& a,
                                                const std::vector<unsigned char>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": sizes differ";
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      return ::testing::AssertionFailure() << what << ": first differing byte at " << i;
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// Models

/// The small model of the GPU model tests: L=2, C=128, NH=2 (HS=64), V=250 padded to 256,
/// maxT=64.
inline ModelConfig small_model_config() {
  ModelConfig config;
  config.max_seq_len = 64;
  config.vocab_size = 250;
  config.padded_vocab_size = 256;
  config.num_layers = 2;
  config.num_heads = 2;
  config.channels = 128;
  return config;
}

}  // namespace gpt2::gpu::test
