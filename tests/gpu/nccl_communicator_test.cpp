// The NCCL communicator on one GPU (a job of one rank, its id handed out by the single-process
// communicator): every collective on device memory gives the single-rank answer, in place and
// out of place; its device is the local rank's. On two GPUs (ranks as threads): NCCL's bf16
// sums are add_bf16's bits, the host backends' arithmetic. Skips without a GPU (or a second
// one) or in a build without NCCL.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "base/bf16.h"
#include "base/rng.h"
#include "parallel/communicator.h"
#include "parallel/nccl_communicator.h"
#include "gpu_test_util.h"
#include "model/thread_communicator.h"

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
  const std::vector<uint16_t> halves = {0x3F80, 0xC000, 0x4049, 0x0001, 0x8000};
  uint16_t* half_data = device_copy(halves);
  uint16_t* half_other = device_copy(std::vector<uint16_t>(halves.size(), 0));
  comm.all_reduce_sum_bf16(half_data, halves.size());
  comm.reduce_scatter_sum_bf16(half_data, half_other, halves.size());
  comm.synchronize();
  EXPECT_EQ(host_copy(half_data, halves.size()), halves);
  EXPECT_EQ(host_copy(half_other, halves.size()), halves);
  GPT2_CUDA_CHECK(cudaFree(half_data));
  GPT2_CUDA_CHECK(cudaFree(half_other));
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
  EXPECT_EQ(comm.stats().calls, 17);  // 12 collectives, 5 synchronizations (one by barrier)

  GPT2_CUDA_CHECK(cudaFree(data));
  GPT2_CUDA_CHECK(cudaFree(other));
  GPT2_CUDA_CHECK(cudaFree(doubles));
#endif
}

TEST(NcclCommunicator, TwoGpusSumBf16AsTheHostBackendsDo) {
  if (!nccl_backend_available()) GTEST_SKIP() << "this build has no NCCL communicator";
  GPT2_REQUIRE_GPU();
#ifdef GPT2_WITH_NCCL
  int devices = 0;
  GPT2_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs, " << devices << " visible";
  constexpr int kWorld = 2;
  constexpr size_t kCount = (1 << 20) + 6;  // several of NCCL's chunks, and an odd tail
  // Values of every magnitude and sign, so that the sums round (and sometimes cancel).
  std::vector<std::vector<uint16_t>> values(kWorld, std::vector<uint16_t>(kCount));
  for (int r = 0; r < kWorld; ++r) {
    Rng rng(90 + static_cast<uint64_t>(r));
    for (uint16_t& v : values[static_cast<size_t>(r)])
      v = float_to_bf16_bits(static_cast<float>((rng.uniform() - 0.5) * std::ldexp(1.0, r)));
  }
  std::vector<uint16_t> expected(kCount);
  for (size_t i = 0; i < kCount; ++i) expected[i] = add_bf16(values[0][i], values[1][i]);
  std::vector<std::vector<uint16_t>> all_reduced(kWorld), scattered(kWorld);
  testing::run_ranks(kWorld, [&](int rank, Communicator& host) {
    NcclCommunicator comm(host);  // device = rank
    const std::vector<uint16_t>& mine = values[static_cast<size_t>(rank)];
    uint16_t* data = device_copy(mine);
    uint16_t* send = device_copy(mine);
    uint16_t* recv = device_copy(std::vector<uint16_t>(kCount / kWorld, 0));
    comm.all_reduce_sum_bf16(data, kCount);
    comm.reduce_scatter_sum_bf16(send, recv, kCount / kWorld);
    comm.synchronize();
    all_reduced[static_cast<size_t>(rank)] = host_copy(data, kCount);
    scattered[static_cast<size_t>(rank)] = host_copy(recv, kCount / kWorld);
    for (uint16_t* p : {data, send, recv}) GPT2_CUDA_CHECK(cudaFree(p));
  });
  for (int rank = 0; rank < kWorld; ++rank) {
    size_t differ = 0;
    for (size_t i = 0; i < kCount; ++i) differ += all_reduced[rank][i] != expected[i];
    for (size_t i = 0; i < kCount / kWorld; ++i)
      differ += scattered[rank][i] != expected[rank * (kCount / kWorld) + i];
    EXPECT_EQ(differ, 0u) << "rank " << rank;
  }
  GPT2_CUDA_CHECK(cudaSetDevice(0));
#endif
}

}  // namespace
}  // namespace gpt2
