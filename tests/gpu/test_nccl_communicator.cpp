// The NCCL communicator on one GPU (a job of one rank, its id handed out by the single-process
// communicator): every collective on device memory gives the single-rank answer, in place and
// out of place; its device is the local rank's. Skips without a GPU or in a build without NCCL.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "dist/communicator.h"
#include "dist/nccl_communicator.h"
#include "gpu_test_util.h"

namespace gpt2 {
namespace {

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* device = nullptr;
  GPT2_CUDA_CHECK(cudaMalloc(&device, host.size() * sizeof(T)));
  GPT2_CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

template <typename T>
std::vector<T> host_copy(const T* device, size_t count) {
  std::vector<T> host(count);
  GPT2_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

TEST(NcclCommunicator, OneRankCollectivesOnDeviceMemory) {
  if (!nccl_backend_available()) GTEST_SKIP() << "this build has no NCCL communicator";
  GPT2_REQUIRE_GPU();
#ifdef GPT2_WITH_NCCL
  SingleProcessCommunicator host;
  NcclCommunicator comm(host);
  EXPECT_STREQ(comm.backend(), "nccl");
  EXPECT_EQ(comm.memory_space(), MemorySpace::kDevice);
  EXPECT_EQ(comm.world_size(), 1);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.device(), 0);
  EXPECT_NE(comm.stream(), nullptr);

  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 1e-30f, -0.0f, 7.0f, 8.0f};
  const size_t n = values.size();
  float* data = device_copy(values);
  float* other = device_copy(std::vector<float>(n, -1.0f));
  comm.all_reduce(data, n, ReduceOp::kSum);
  comm.all_reduce(data, n, ReduceOp::kMax);
  comm.reduce_scatter_sum(data, other, n);
  comm.synchronize();
  EXPECT_EQ(host_copy(data, n), values);
  EXPECT_EQ(host_copy(other, n), values);
  GPT2_CUDA_CHECK(cudaMemset(other, 0, n * sizeof(float)));
  comm.all_gather(data, other, n);
  comm.reduce_scatter_sum(data, data, n);  // in place
  comm.all_gather(data, data, n);
  comm.synchronize();
  EXPECT_EQ(host_copy(other, n), values);
  EXPECT_EQ(host_copy(data, n), values);

  // Raw bytes (bf16 parameters): an odd count, out of place and in place.
  const std::vector<unsigned char> bytes = {9, 8, 7, 6, 5, 4, 3};
  unsigned char* byte_data = device_copy(bytes);
  unsigned char* byte_other = device_copy(std::vector<unsigned char>(bytes.size(), 0));
  comm.all_gather_bytes(byte_data, byte_other, bytes.size());
  comm.all_gather_bytes(byte_data, byte_data, bytes.size());
  comm.synchronize();
  EXPECT_EQ(host_copy(byte_other, bytes.size()), bytes);
  EXPECT_EQ(host_copy(byte_data, bytes.size()), bytes);
  GPT2_CUDA_CHECK(cudaFree(byte_data));
  GPT2_CUDA_CHECK(cudaFree(byte_other));

  double* doubles = device_copy(std::vector<double>{0.1, -0.2});
  comm.all_reduce(doubles, 2, ReduceOp::kSum);
  comm.broadcast(doubles, 2 * sizeof(double), 0);
  comm.barrier();
  EXPECT_EQ(host_copy(doubles, 2), (std::vector<double>{0.1, -0.2}));
  EXPECT_EQ(comm.stats().calls, 14);  // 10 collectives, 4 synchronizations (one by barrier)

  GPT2_CUDA_CHECK(cudaFree(data));
  GPT2_CUDA_CHECK(cudaFree(other));
  GPT2_CUDA_CHECK(cudaFree(doubles));
#endif
}

}  // namespace
}  // namespace gpt2
