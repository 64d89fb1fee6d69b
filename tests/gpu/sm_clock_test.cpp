// gpu::sm_clock_mhz (kernels/gpu/sm_clock.cuh) against the device's rated peak clock: a reading
// is a real clock (above a fifth of the peak, at most the peak plus the timer's granularity),
// a busy GPU does not read above its peak, and a window under a microsecond is refused.
#include <gtest/gtest.h>

#include "base/error.h"
#include "gpu_test_util.h"
#include "kernels/gpu/sm_clock.cuh"

namespace gpt2::gpu::test {
namespace {

double peak_mhz() {
  int device = 0, khz = 0;
  GPT2_CUDA_CHECK(cudaGetDevice(&device));
  GPT2_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  return khz / 1000.0;
}

TEST(GpuSmClock, ReadsARealClockAtMostThePeak) {
  GPT2_REQUIRE_GPU();
  const double peak = peak_mhz();
  ASSERT_GT(peak, 0.0);
  for (const int window_us : {20, 200, 2000}) {
    const double mhz = sm_clock_mhz(nullptr, window_us);
    EXPECT_GT(mhz, 0.2 * peak) << "window " << window_us << " us, peak " << peak << " MHz";
    // The global timer ticks in steps of up to a microsecond: 5% over a 20 us window.
    EXPECT_LE(mhz, peak * (window_us >= 200 ? 1.01 : 1.05))
        << "window " << window_us << " us, peak " << peak << " MHz";
  }
}

TEST(GpuSmClock, RefusesAnEmptyWindow) {
  GPT2_REQUIRE_GPU();
  EXPECT_THROW(sm_clock_mhz(nullptr, 0), Error);
}

}  // namespace
}  // namespace gpt2::gpu::test
