/**
 * @file multi_gpu_test_util.h
 * @brief What the tests of the models on several GPUs share: the NCCL-or-skip and
 *        two-GPUs-or-skip guards, and a relative comparison of whole parameter-sized vectors.
 */
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "parallel/nccl_communicator.h"

/// Skips the test, saying why, in a build without NCCL or without a usable GPU.
#define GPT2_REQUIRE_NCCL()                                                       \
  do {                                                                            \
    if (!::gpt2::nccl_backend_available()) GTEST_SKIP() << "this build has no NCCL"; \
    GPT2_REQUIRE_GPU();                                                           \
  } while (0)

/// Skips the test, saying why, with fewer than two visible GPUs.
#define GPT2_REQUIRE_TWO_GPUS()                                                        \
  do {                                                                                 \
    int devices = 0;                                                                   \
    GPT2_CUDA_CHECK(cudaGetDeviceCount(&devices));                                     \
    if (devices < 2) GTEST_SKIP() << "needs 2 GPUs, " << devices << " visible";        \
  } while (0)

namespace gpt2::testing {

/// max |got - want| over max |want| (the absolute difference when want is all zero).
inline double max_relative_difference(const std::vector<float>& got,
                                      const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double scale = 0.0, worst = 0.0;
  for (const float x : want) scale = std::max(scale, std::fabs(double(x)));
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  return scale > 0 ? worst / scale : worst;
}

}  // namespace gpt2::testing
