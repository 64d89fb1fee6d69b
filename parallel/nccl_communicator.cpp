/**
 * @file nccl_communicator.cpp
 * @brief NcclCommunicator: one NCCL call per collective on the communicator's stream.
 */
#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "base/error.h"

namespace gpt2 {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

bool env_set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

}  // namespace

bool nccl_backend_available() { return true; }

NcclCommunicator::NcclCommunicator(Communicator& host, CUstream_st* stream)
    : host_(host), stream_(stream) {
  GPT2_CHECK(host.memory_space() == MemorySpace::kHost,
             "the NCCL id is handed out through a host communicator, not ", host.backend());
  int devices = 0;
  GPT2_CUDA_CHECK(cudaGetDeviceCount(&devices));
  // A launcher that gives each task its own GPU (srun --gpus-per-task=1) leaves one visible.
  if (devices != 1 && host.local_rank() >= devices)
    GPT2_FAIL("rank ", host.rank(), " is rank ", host.local_rank(), " of ", host.local_size(),
              " on its node, which has ", devices, " visible GPU(s): start at most ", devices,
              " rank(s) per node (one per GPU)");
  device_ = devices == 1 ? 0 : host.local_rank();
  GPT2_CUDA_CHECK(cudaSetDevice(device_));
  if (stream_ == nullptr) {
    GPT2_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    owns_stream_ = true;
  }
  ncclUniqueId id{};
  if (host.rank() == 0) GPT2_NCCL_CHECK(ncclGetUniqueId(&id));
  host.broadcast(&id, sizeof id, 0);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (!env_set("NCCL_MAX_CTAS") && !env_set("NCCL_MIN_CTAS")) config.maxCTAs = kDefaultMaxCtas;
  GPT2_NCCL_CHECK(ncclCommInitRankConfig(&comm_, host.world_size(), id, host.rank(), &config));
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> own_host, ncclComm* comm,
                                   int device)
    : own_host_(std::move(own_host)), host_(*own_host_), comm_(comm), device_(device) {
  GPT2_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  owns_stream_ = true;
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  std::unique_ptr<Communicator> group_host = host_.split(color, key);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (!env_set("NCCL_MAX_CTAS") && !env_set("NCCL_MIN_CTAS")) config.maxCTAs = kDefaultMaxCtas;
  ncclComm* group = nullptr;
  GPT2_NCCL_CHECK(ncclCommSplit(comm_, color, key, &group, &config));
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(std::move(group_host), group, device_));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) GPT2_NCCL_CHECK_NOTHROW(ncclCommDestroy(comm_));
  if (owns_stream_) GPT2_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_));
}

void NcclCommunicator::all_reduce(float* data, size_t count, ReduceOp op) {
  const Clock::time_point start = Clock::now();
  GPT2_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat32, nccl_op(op), comm_, stream_));
  record(count * sizeof(float), seconds_since(start));
}

void NcclCommunicator::all_reduce(double* data, size_t count, ReduceOp op) {
  const Clock::time_point start = Clock::now();
  GPT2_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat64, nccl_op(op), comm_, stream_));
  record(count * sizeof(double), seconds_since(start));
}

void NcclCommunicator::reduce_scatter_sum(const float* send, float* recv, size_t recv_count) {
  const Clock::time_point start = Clock::now();
  GPT2_NCCL_CHECK(
      ncclReduceScatter(send, recv, recv_count, ncclFloat32, ncclSum, comm_, stream_));
  record(recv_count * world_size() * sizeof(float), seconds_since(start));
}

void NcclCommunicator::all_reduce_sum_bf16(void* data, size_t count) {
  const Clock::time_point start = Clock::now();
  GPT2_NCCL_CHECK(ncclAllReduce(data, data, count, ncclBfloat16, ncclSum, comm_, stream_));
  record(count * 2, seconds_since(start));
}

void NcclCommunicator::reduce_scatter_sum_bf16(const void* send, void* recv, size_t recv_count) {
  const Clock::time_point start = Clock::now();
  GPT2_NCCL_CHECK(
      ncclReduceScatter(send, recv, recv_count, ncclBfloat16, ncclSum, comm_, stream_));
  record(recv_count * world_size() * 2, seconds_since(start));
}

void NcclCommunicator::all_gather(const float* send, float* recv, size_t send_count) {
  const Clock::time_point start = Clock::now();
  GPT2_NCCL_CHECK(ncclAllGather(send, recv, send_count, ncclFloat32, comm_, stream_));
  record(send_count * sizeof(float), seconds_since(start));
}

void NcclCommunicator::all_gather_bytes(const void* send, void* recv, size_t send_bytes) {
  const Clock::time_point start = Clock::now();
  GPT2_NCCL_CHECK(ncclAllGather(send, recv, send_bytes, ncclUint8, comm_, stream_));
  record(send_bytes, seconds_since(start));
}

void NcclCommunicator::broadcast(void* data, size_t bytes, int root) {
  const Clock::time_point start = Clock::now();
  GPT2_CHECK(root >= 0 && root < world_size(), "root ", root, " of world size ", world_size());
  GPT2_NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_));
  record(rank() == root ? bytes : 0, seconds_since(start));
}

void NcclCommunicator::synchronize() {
  const Clock::time_point start = Clock::now();
  GPT2_CUDA_CHECK(cudaStreamSynchronize(stream_));
  record(0, seconds_since(start));
}

void NcclCommunicator::begin_group() { GPT2_NCCL_CHECK(ncclGroupStart()); }

void NcclCommunicator::end_group() { GPT2_NCCL_CHECK(ncclGroupEnd()); }

void NcclCommunicator::barrier() {
  synchronize();
  host_.barrier();
}

void NcclCommunicator::abort(int code) {
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
  host_.abort(code);
  std::_Exit(code);  // not reached (the host's abort does not return)
}

}  // namespace gpt2
