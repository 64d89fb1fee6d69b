/**
 * @file global_norm.cpp
 * @brief Squared L2 norm of a float vector, summed in double (CPU reference).
 *
 * The N elements are cut into fixed chunks of kChunk; each chunk is summed in index order by
 * one thread, and the chunk sums are then added in chunk order by one thread. The chunking
 * depends only on N, so the result is bit-identical for any thread count (a plain OpenMP
 * reduction is not: its combination order follows the threads).
 */
#include "kernels/cpu/global_norm.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gpt2::cpu {
namespace {
constexpr int64_t kChunk = 1 << 14;

// Below this many elements a parallel region costs more than it saves (much more when the
// cores are shared), so small calls run on the calling thread.
constexpr int64_t kMinParallelElements = int64_t{1} << 16;
}  // namespace

double global_norm_squared(const float* grads, int64_t N) {
  const int64_t num_chunks = (N + kChunk - 1) / kChunk;
  std::vector<double> chunk_sums(num_chunks);
#pragma omp parallel for schedule(static) if (N >= kMinParallelElements)
  for (int64_t chunk = 0; chunk < num_chunks; ++chunk) {
    const int64_t begin = chunk * kChunk;
    const int64_t end = std::min(N, begin + kChunk);
    double sum = 0.0;
    for (int64_t i = begin; i < end; ++i) sum += static_cast<double>(grads[i]) * grads[i];
    chunk_sums[chunk] = sum;
  }
  double total = 0.0;
  for (const double chunk_sum : chunk_sums) total += chunk_sum;
  return total;
}

}  // namespace gpt2::cpu
