/**
 * @file mpi_communicator.h
 * @brief Communicator over MPI (host memory): the backend of data-parallel --device cpu, and
 *        the host side that hands out the NCCL id for --device cuda.
 *
 * The constructor initializes MPI (MPI_Init_thread, MPI_THREAD_FUNNELED: only the main thread
 * calls MPI; OpenMP threads never do) unless something already did, and works on a duplicate
 * of MPI_COMM_WORLD whose errors are returned (and thrown as gpt2::Error with MPI's message)
 * rather than fatal. local_rank() / local_size() come from MPI_Comm_split_type
 * (MPI_COMM_TYPE_SHARED): the ranks of one node. The destructor finalizes MPI when the
 * constructor initialized it; MPI cannot be initialized twice in a process, so there is one
 * job MpiCommunicator per process (a second one after the first was destroyed throws); split()
 * makes groups of it (MPI_Comm_split), which free their communicators and nothing else.
 * bf16 sums use a user-defined MPI operation on 16-bit elements (add_bf16), declared
 * non-commutative so that MPI applies it in rank order.
 * abort() is MPI_Abort on the world communicator: the launcher (mpirun, srun) ends every rank.
 * Only built when CMake finds MPI (mpi_backend_available()); mpi.h stays out of this header.
 */
#pragma once

#include <memory>

#include "parallel/communicator.h"

namespace gpt2 {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator();
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  const char* backend() const override { return "mpi"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  void all_reduce(float* data, size_t count, ReduceOp op) override;
  void all_reduce(double* data, size_t count, ReduceOp op) override;
  void reduce_scatter_sum(const float* send, float* recv, size_t recv_count) override;
  void all_reduce_sum_bf16(void* data, size_t count) override;
  void reduce_scatter_sum_bf16(const void* send, void* recv, size_t recv_count) override;
  void all_gather(const float* send, float* recv, size_t send_count) override;
  void all_gather_bytes(const void* send, void* recv, size_t send_bytes) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  [[noreturn]] void abort(int code) override;

 private:
  struct Handles;  // the MPI communicators (their type is the MPI library's)
  /// A group of an existing communicator (split): MPI is already initialized and this one
  /// does not finalize it.
  explicit MpiCommunicator(std::unique_ptr<Handles> handles);
  void set_ranks();
  std::unique_ptr<Handles> handles_;
  bool initialized_here_ = false;
  int rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1;
};

}  // namespace gpt2
