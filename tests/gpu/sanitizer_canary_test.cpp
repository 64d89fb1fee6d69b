// A deliberate error for compute-sanitizer to find: residual_forward writing one element past
// its output buffer. Disabled (it tests the tool, not the code); tools/data_parallel_check.sh
// runs it under the very memcheck command it runs the data-parallel tests with, and that command
// must fail on it, so a memcheck step that reports "passed" is known to catch a real error.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/gpu/residual.cuh"

namespace gpt2::gpu::test {
namespace {

TEST(SanitizerCanary, DISABLED_WritesOnePastItsBuffer) {
  GPT2_REQUIRE_GPU();
  constexpr int64_t kN = 256;
  DeviceBuffer<float> a(kN), b(kN), out(kN - 1);
  a.upload(std::vector<float>(kN, 1.0f));
  b.upload(std::vector<float>(kN, 2.0f));
  residual_forward(out.get(), a.get(), b.get(), kN, nullptr);  // kN into kN - 1
  GPT2_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace gpt2::gpu::test
