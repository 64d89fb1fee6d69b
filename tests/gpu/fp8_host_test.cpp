// The host FP8 encoding (kernels/cpu/fp8.h) against CUDA's own host path of
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) (cuda_fp8.h), bit for bit: every bf16 value as a
// float (all 65536 patterns: every binade, the infinities and NaNs) and a million random float
// bit patterns, in E4M3 and E5M2. Needs the CUDA headers only, no GPU: it runs wherever CUDA
// builds. (The device conversion, cvt.rn.satfinite, is checked against the same twin by the FP8
// kernel tests on a GPU.)
#include <cstdint>
#include <cstring>

#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include "base/rng.h"
#include "kernels/cpu/fp8.h"

namespace gpt2::cpu {
namespace {

float float_of_bits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

int64_t mismatches(Fp8Format format, __nv_fp8_interpretation_t cuda_format, uint32_t bits) {
  const float x = float_of_bits(bits);
  const auto want = static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, cuda_format));
  const uint8_t got = fp8_encode(x, format);
  if (got != want) ADD_FAILURE() << std::hex << "bits 0x" << bits << ": 0x" << int(got)
                                 << " against CUDA's 0x" << int(want);
  return got != want;
}

TEST(Fp8Host, EncodingIsCudasSatfiniteConversionBitForBit) {
  const std::pair<Fp8Format, __nv_fp8_interpretation_t> formats[] = {
      {Fp8Format::kE4M3, __NV_E4M3}, {Fp8Format::kE5M2, __NV_E5M2}};
  for (const auto& [format, cuda_format] : formats) {
    int64_t wrong = 0;
    for (uint32_t high = 0; high < 65536 && wrong < 10; ++high)
      wrong += mismatches(format, cuda_format, high << 16);
    Rng rng(8);
    for (int i = 0; i < 1000000 && wrong < 10; ++i)
      wrong += mismatches(format, cuda_format, static_cast<uint32_t>(rng.next_u64()));
    EXPECT_EQ(wrong, 0) << to_string(format);
  }
}

}  // namespace
}  // namespace gpt2::cpu
