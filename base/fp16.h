/**
 * @file fp16.h
 * @brief IEEE half (binary16) -> fp32 on the host, bit by bit: how F16 safetensors are read.
 *
 * half_bits_to_float is exact (every half is a float): normals re-biased (15 -> 127), the
 * subnormals m * 2^-24 normalized, +-0 kept, +-inf kept, NaN stays NaN with its sign and its
 * payload in the top mantissa bits (quiet bit forced, as bf16_bits_to_float's NaNs are quiet
 * whenever the source was). Nothing here writes halves: the project stores fp32 or bf16.
 */
#pragma once

#include <cstdint>
#include <cstring>

namespace gpt2 {

inline float half_bits_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  uint32_t mantissa = half & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1Fu) {  // inf (mantissa 0) or NaN
    bits = sign | 0x7F800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent != 0) {  // normal: 2^(e-15) * 1.m
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // +-0
    bits = sign;
  } else {  // subnormal: m * 2^-24; shift the leading 1 into the implicit bit
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    // 2^-14 * 0.m = 2^(-14 - shift) * 1.m'
    bits = sign | (static_cast<uint32_t>(127 - 14 - shift) << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace gpt2
