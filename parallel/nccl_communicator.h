/**
 * @file nccl_communicator.h
 * @brief Communicator over NCCL (device memory): the backend --device cuda will train with
 *        across GPUs.
 *
 * Built when CMake finds NCCL beside the CUDA toolkit (nccl_backend_available()); the trainer
 * makes one for a --device cuda job of several ranks (or --comm nccl at world size 1), and the
 * CUDA model reduces its gradients through it (model/cuda_data_parallel.h).
 * Construction, on every rank of a job together: the CUDA device is set to host.local_rank(),
 * or to 0 when the launcher made only one GPU visible to each task (a node with fewer visible
 * GPUs than ranks is refused otherwise), rank 0 creates the NCCL unique id,
 * host.broadcast() hands it to every rank (host is the job's MPI communicator, or the
 * single-process one for a job of one rank), and ncclCommInitRank joins them.
 * The collectives take device pointers and are enqueued on stream() (the caller's stream, or one
 * the communicator creates); they return at once and synchronize() waits. Their recorded time
 * is the host's time to enqueue them, plus synchronize()'s wait: time on the GPU is for the
 * caller to measure with events on the stream. barrier() synchronizes the stream and then the
 * host communicator; abort() aborts the NCCL communicator (unblocking kernels that wait on a
 * dead peer) and then the job through the host communicator.
 * ReduceOp::kSum is ncclSum, kMax ncclMax; the bf16 sums are ncclSum over ncclBfloat16;
 * broadcast sends bytes (ncclUint8).
 * Thread blocks: the communicator allows NCCL kDefaultMaxCtas per collective
 * (ncclConfig_t::maxCTAs), the count that trained fastest on two H100s among 4 to 64, with
 * communication overlapped or not (bench/results/data_parallel_tuning.md): the collectives
 * finish sooner, and slow the model's kernels beside them for less time. NCCL_MAX_CTAS /
 * NCCL_MIN_CTAS in the environment, when set, decide instead.
 */
#pragma once

#include <memory>

#include "parallel/communicator.h"

struct ncclComm;
struct CUstream_st;

namespace gpt2 {

/// True when this build has the NCCL backend.
bool nccl_backend_available();

/// NCCL's thread blocks per collective unless the environment says (see the file comment).
constexpr int kDefaultMaxCtas = 64;

class NcclCommunicator final : public Communicator {
 public:
  /// host must outlive this communicator. stream nullptr: the communicator creates its own.
  explicit NcclCommunicator(Communicator& host, CUstream_st* stream = nullptr);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  const char* backend() const override { return "nccl"; }
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  int rank() const override { return host_.rank(); }
  int world_size() const override { return host_.world_size(); }
  int local_rank() const override { return host_.local_rank(); }
  int local_size() const override { return host_.local_size(); }
  int device() const { return device_; }
  CUstream_st* stream() const { return stream_; }
  CUstream_st* device_stream() const override { return stream_; }
  Communicator& host_communicator() override { return host_; }

  void all_reduce(float* data, size_t count, ReduceOp op) override;
  void all_reduce(double* data, size_t count, ReduceOp op) override;
  void reduce_scatter_sum(const float* send, float* recv, size_t recv_count) override;
  void all_reduce_sum_bf16(void* data, size_t count) override;
  void reduce_scatter_sum_bf16(const void* send, void* recv, size_t recv_count) override;
  void all_gather(const float* send, float* recv, size_t send_count) override;
  void all_gather_bytes(const void* send, void* recv, size_t send_bytes) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  void synchronize() override;
  void begin_group() override;
  void end_group() override;
  /// ncclCommSplit over the host communicator's split (owned by the new one), with a stream of
  /// its own on the same device.
  std::unique_ptr<Communicator> split(int color, int key) override;
  [[noreturn]] void abort(int code) override;

 private:
  /// A group made by split: its host communicator is its own.
  NcclCommunicator(std::unique_ptr<Communicator> own_host, ncclComm* comm, int device);
  std::unique_ptr<Communicator> own_host_;
  Communicator& host_;
  ncclComm* comm_ = nullptr;
  CUstream_st* stream_ = nullptr;
  bool owns_stream_ = false;
  int device_ = 0;
};

}  // namespace gpt2
