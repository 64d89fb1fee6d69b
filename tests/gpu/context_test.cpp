// gpu::Context and the GPU probe: the probe always explains a "no"; a Context owns live handles,
// a workspace and the device's name.
#include <string>

#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/gpu/context.cuh"

namespace gpt2::gpu {
namespace {

TEST(GpuContext, ProbeExplainsItsAnswer) {
  std::string why = "stale";
  const bool available = gpu_available(&why);
  if (available) {
    EXPECT_TRUE(why.empty()) << why;
  } else {
    EXPECT_FALSE(why.empty());
    EXPECT_NE(why, "stale");
    std::printf("[ probe    ] no usable GPU: %s\n", why.c_str());
  }
  EXPECT_EQ(gpu_available(nullptr), available);  // the reason is optional
}

TEST(GpuContext, OwnsStreamHandlesAndWorkspace) {
  GPT2_REQUIRE_GPU();
  Context ctx(size_t(1) << 20);
  EXPECT_NE(ctx.stream(), nullptr);
  EXPECT_NE(ctx.cublas(), nullptr);
  EXPECT_NE(ctx.cublaslt(), nullptr);
  EXPECT_NE(ctx.lt_workspace(), nullptr);
  EXPECT_EQ(ctx.lt_workspace_bytes(), size_t(1) << 20);
  EXPECT_FALSE(ctx.device_name().empty());
  EXPECT_EQ(ctx.device_name(), gpu_device_name(ctx.device()));
  EXPECT_TRUE(ctx.use_cublaslt());
  ctx.set_use_cublaslt(false);
  EXPECT_FALSE(ctx.use_cublaslt());
  EXPECT_NO_THROW(ctx.synchronize());
  std::printf("[ device   ] %s\n", ctx.device_name().c_str());
}

TEST(GpuContext, WorkspaceMayBeEmpty) {
  GPT2_REQUIRE_GPU();
  Context ctx(0);
  EXPECT_EQ(ctx.lt_workspace(), nullptr);
  EXPECT_EQ(ctx.lt_workspace_bytes(), 0u);
}

}  // namespace
}  // namespace gpt2::gpu
