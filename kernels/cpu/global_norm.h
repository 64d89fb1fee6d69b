/**
 * @file global_norm.h
 * @brief Squared L2 norm of a gradient vector (CPU reference), for clipping and logging.
 *
 * Returns sum_i grads[i]^2 accumulated in double, over fixed-size chunks combined in index
 * order, so the result is bit-identical for any thread count.
 */
#pragma once

#include <cstdint>

namespace gpt2::cpu {

double global_norm_squared(const float* grads, int64_t N);

}  // namespace gpt2::cpu
