/**
 * @file bf16.h
 * @brief bf16 <-> fp32 on the host, bit by bit: the project's one conversion (bf16 checkpoints,
 *        the CUDA model's host reads, the GPU tests' reference values).
 *
 * float_to_bf16_bits rounds to nearest, ties to even, as __float2bfloat16_rn does on the device;
 * a NaN stays a NaN (sign kept, quiet bit forced, so dropping the low mantissa bits cannot turn
 * it into an infinity). bf16_bits_to_float is exact (the mantissa is zero-extended). No CUDA
 * header is needed: bf16 values are passed as their 16 bits.
 */
#pragma once

#include <cstdint>
#include <cstring>

namespace gpt2 {

inline uint16_t float_to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

inline float bf16_bits_to_float(uint16_t bits16) {
  const uint32_t bits = static_cast<uint32_t>(bits16) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace gpt2
