// cuBLAS is opened by its first call (kernels/gpu/cublas_loader.cu), not at the start: nothing
// of it is mapped before, the first call maps it and returns what the library returns. Needs no
// GPU: cublasGetStatusString and a handle's creation without a device exercise the loading.
#include <gtest/gtest.h>

#include <cublasLt.h>
#include <cublas_v2.h>

#include <fstream>
#include <string>

namespace gpt2 {
namespace {

// Whether a library whose file name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}

TEST(CublasLoader, TheLibrariesAreOpenedByTheirFirstCall) {
#ifndef GPT2_LAZY_CUBLAS_TEST
  GTEST_SKIP() << "this build links cuBLAS at start (GPT2_LAZY_CUBLAS=OFF)";
#endif
  // ctest runs each TEST in a process of its own, where nothing has called cuBLAS yet; the whole
  // binary at once may have called it in an earlier test.
  if (::testing::UnitTest::GetInstance()->test_to_run_count() > 1 && mapped("libcublas"))
    GTEST_SKIP() << "an earlier test of this process called cuBLAS (run this one alone)";
  EXPECT_FALSE(mapped("libcublas")) << "cuBLAS was loaded before its first call";
  const std::string success = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
  EXPECT_FALSE(success.empty());
  EXPECT_NE(success, cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED));
  EXPECT_TRUE(mapped("libcublas.so"));
  cublasLtHandle_t handle = nullptr;
  const cublasStatus_t status = cublasLtCreate(&handle);  // with or without a GPU: an answer
  EXPECT_TRUE(mapped("libcublasLt.so"));
  if (status == CUBLAS_STATUS_SUCCESS) {
    EXPECT_EQ(cublasLtDestroy(handle), CUBLAS_STATUS_SUCCESS);
  }
}

}  // namespace
}  // namespace gpt2
