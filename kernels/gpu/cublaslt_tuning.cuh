/**
 * @file cublaslt_tuning.cuh
 * @brief A cuBLASLt GEMM's algorithm by measurement: among the heuristic's candidates for a
 *        shape, the fastest whose outputs are bitwise those of the heuristic's first choice.
 *
 * cuBLASLt ranks its algorithms by a model, and for some shapes its first pick is 5-20% slower
 * than another candidate (bench/NOTES_fp8.md item 19: the classifier's FP8 GEMMs, the attention
 * projection's forward). choose_algorithm runs every candidate on the call's own operands once
 * per shape, keeps those whose outputs hash the same as the first runnable candidate's, times
 * them with CUDA events and returns the fastest. So a shape's algorithm changes its speed and
 * never a bit: results, bitwise resume and the tests do not depend on which one won. It leaves
 * the outputs as one run of the GEMM would: a GEMM that reads D (beta = 1) has D saved before
 * the trials (a temporary device copy) and restored before each. The choice is made on a shape's
 * first, eager call; inside a CUDA graph capture, with tuning off (Context::gemm_tuning), or
 * when D's copy cannot be allocated, it is the first candidate that runs, as the heuristic
 * ranks them. Host-only declarations.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace gpt2::gpu {

class Context;

/// One GEMM as choose_algorithm runs it.
struct GemmTrial {
  /// Queues the GEMM with `algo` on the Context's stream; cuBLASLt's status (NOT_SUPPORTED:
  /// nothing launched, the candidate is skipped).
  std::function<cublasStatus_t(const cublasLtMatmulAlgo_t& algo)> launch;
  /// What the GEMM writes (D, and a GELU epilogue's aux): device pointers and byte counts.
  std::vector<std::pair<const void*, size_t>> outputs;
  /// D when the GEMM also reads it (beta = 1), else nullptr; and its bytes.
  void* accumulated = nullptr;
  size_t accumulated_bytes = 0;
  /// False when D overwrites an input other than itself (a DGELU aux in place): run once, with
  /// the first candidate that runs.
  bool repeatable = true;
};

/// The index of the candidate chosen (see above) after the GEMM has run once with it; or
/// candidates.size() when none runs (nothing launched, outputs untouched). Throws gpt2::Error
/// on a cuBLASLt error other than NOT_SUPPORTED or a CUDA error.
size_t choose_algorithm(const Context& ctx, const std::vector<cublasLtMatmulAlgo_t>& candidates,
                        const GemmTrial& trial);

/// SplitMix64's finalizer: a bijection of 64-bit words with full avalanche.
constexpr uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The 64-bit word hashed for the 32-bit word at `index` (little-endian, the last one padded
/// with zero bytes): position and value together, so a moved or changed word changes the hash.
constexpr uint64_t hashed_word(uint64_t index, uint32_t word) {
  return mix64((index << 32) ^ word ^ 0x9e3779b97f4a7c15ull);
}

/// sum over words of hashed_word (mod 2^64) of `bytes` bytes at device pointer `data`: the
/// order of the additions does not matter, so blocks add their parts with atomics. Waits for
/// the stream. CPU twin: bytes_hash.
uint64_t device_bytes_hash(const void* data, size_t bytes, cudaStream_t stream);

/// The same hash of host memory.
uint64_t bytes_hash(const void* data, size_t bytes);

}  // namespace gpt2::gpu
