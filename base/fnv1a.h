/**
 * @file fnv1a.h
 * @brief FNV-1a 64, the hash that checkpoint files record of their bytes.
 *
 * fnv1a64(hash, data, bytes) continues a hash over more bytes: start from kFnvOffset; hashing
 * two pieces in turn equals hashing their concatenation. Not cryptographic: it finds flipped
 * bytes and truncations, not tampering.
 */
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpt2 {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

inline uint64_t fnv1a64(uint64_t hash, const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    hash ^= p[i];
    hash *= kFnvPrime;
  }
  return hash;
}

}  // namespace gpt2
