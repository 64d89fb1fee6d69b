/**
 * @file communicator.h
 * @brief The collectives of data-parallel training over the ranks of one job, and the job's
 *        communicator from the launcher.
 *
 * A job is world_size() processes (ranks) started together by a launcher (mpirun, or Slurm's
 * srun through PMI/PMIx); local_rank() / local_size() number the ranks of one node (a GPU
 * rank uses device local_rank()). Three backends, one contract:
 *   - SingleProcessCommunicator: world size 1, no launcher, no MPI call; every collective is
 *     the identity (a copy where send and receive differ).
 *   - MpiCommunicator (parallel/mpi_communicator.h, --device cpu): host memory, OpenMPI.
 *   - NcclCommunicator (parallel/nccl_communicator.h, --device cuda): device memory, NCCL; the
 *     unique id is broadcast over a host communicator (MPI), the device is local_rank().
 * Every rank calls the same collectives in the same order with the same counts (a rank that
 * calls another collective, or none, leaves the others waiting: abort() is what a failing
 * rank calls instead). Counts are elements. Results are identical on every rank.
 * bf16 sums (all_reduce_sum_bf16, reduce_scatter_sum_bf16) take raw bf16 values (2 bytes each,
 * base/bf16.h on the host): every addition is done in fp32 and rounded to bf16 (nearest even),
 * as NCCL's ncclBfloat16 sum does, so a sum over n ranks is rounded n - 1 times (the host
 * backends add in rank order; NCCL in its algorithm's order, fixed for a world size).
 * In place: all_reduce works in place; reduce_scatter_sum may receive into its own block of the
 * send buffer (recv == send + rank * recv_count; the other blocks of send are then unspecified
 * afterwards) and all_gather / all_gather_bytes may send from their own block of the receive
 * buffer (send == recv + rank * send_count), as NCCL defines them.
 * Streams: a device backend runs its collectives in order on one CUDA stream,
 * device_stream(); a caller orders them against its own work with events on that stream.
 * Completion: host backends return when the collective is complete on this rank; NCCL enqueues
 * on its stream and returns, synchronize() waits.
 * Determinism: for a fixed world size, count and backend, a collective adds in a fixed order
 * (the library's algorithm is chosen by world size and count), so repeated runs give the same
 * bits; sum_in_rank_order() adds per-rank scalars in rank order whatever the library does.
 * Every call is counted in stats(): calls, bytes this rank sends, and the wall time spent in
 * the call (host backends: including the wait for the slowest rank).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

struct CUstream_st;  // cudaStream_t, without the CUDA headers

namespace gpt2 {

enum class ReduceOp { kSum, kMax };

/// Where a communicator's buffers live.
enum class MemorySpace { kHost, kDevice };

struct CommStats {
  int64_t calls = 0;
  int64_t bytes = 0;      // payload sent by this rank
  double seconds = 0.0;   // wall time inside the collectives
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual const char* backend() const = 0;  // "single" | "mpi" | "nccl"
  virtual MemorySpace memory_space() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int local_rank() const = 0;  // rank among this node's ranks
  virtual int local_size() const = 0;  // ranks on this node

  /// data (count) becomes op over every rank's data, element by element.
  virtual void all_reduce(float* data, size_t count, ReduceOp op) = 0;
  virtual void all_reduce(double* data, size_t count, ReduceOp op) = 0;
  /// send (world_size * recv_count) summed over the ranks; recv (recv_count) gets block rank().
  virtual void reduce_scatter_sum(const float* send, float* recv, size_t recv_count) = 0;
  /// The bf16 forms of all_reduce (kSum) and reduce_scatter_sum (see the file comment).
  virtual void all_reduce_sum_bf16(void* data, size_t count) = 0;
  virtual void reduce_scatter_sum_bf16(const void* send, void* recv, size_t recv_count) = 0;
  /// recv (world_size * send_count) gets every rank's send (send_count) in rank order.
  virtual void all_gather(const float* send, float* recv, size_t send_count) = 0;
  /// The same for raw bytes (any element type: bf16 parameters): recv (world_size *
  /// send_bytes) gets every rank's send_bytes in rank order.
  virtual void all_gather_bytes(const void* send, void* recv, size_t send_bytes) = 0;
  /// root's bytes to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  /// Waits for the collectives issued so far (NCCL); host backends have nothing to wait for.
  virtual void synchronize() {}
  /// Collectives issued between begin_group and end_group may be fused into one launch (NCCL's
  /// group calls); host backends run each as it comes. Groups do not nest; a device backend
  /// starts none of a group's collectives before end_group.
  virtual void begin_group() {}
  virtual void end_group() {}
  /// Device backends: the CUDA stream the collectives are enqueued on; host backends: nullptr.
  virtual CUstream_st* device_stream() const { return nullptr; }
  /// The job's communicator over host memory: this one for host backends, the one that handed
  /// out the NCCL id for NCCL. Host-side scalars (sum_in_rank_order) go through it.
  virtual Communicator& host_communicator() { return *this; }

  /// Collective: the ranks that pass the same `color` form a new communicator of the same
  /// backend (as MPI_Comm_split), numbered by `key` (ties: by rank here). Every rank gets its
  /// group's; it must not outlive this one. local_rank() / local_size() of the new one count
  /// its ranks on this node.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  /// Ends every process of the job, this one with exit code `code`, so that no rank is left
  /// waiting in a collective for a rank that failed. Flushes stdout and stderr first. Does not
  /// return.
  [[noreturn]] virtual void abort(int code) = 0;

  const CommStats& stats() const { return stats_; }

 protected:
  /// Counts one call that sent `bytes` and took `seconds`.
  void record(size_t bytes, double seconds) {
    ++stats_.calls;
    stats_.bytes += static_cast<int64_t>(bytes);
    stats_.seconds += seconds;
  }

 private:
  CommStats stats_;
};

/// World size 1: no launcher, no library; collectives copy or do nothing.
class SingleProcessCommunicator final : public Communicator {
 public:
  const char* backend() const override { return "single"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  void all_reduce(float* data, size_t count, ReduceOp op) override;
  void all_reduce(double* data, size_t count, ReduceOp op) override;
  void reduce_scatter_sum(const float* send, float* recv, size_t recv_count) override;
  void all_reduce_sum_bf16(void* data, size_t count) override;
  void reduce_scatter_sum_bf16(const void* send, void* recv, size_t recv_count) override;
  void all_gather(const float* send, float* recv, size_t send_count) override;
  void all_gather_bytes(const void* send, void* recv, size_t send_bytes) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override { record(0, 0.0); }
  std::unique_ptr<Communicator> split(int color, int key) override;
  [[noreturn]] void abort(int code) override;
};

/// The sum over the ranks of every rank's `value`, added in rank order (rank 0 first), so it
/// is the same on every rank and the same for any library algorithm: the values are gathered
/// exactly (an all-reduce of one slot per rank, the other slots zero: x + 0 is exact) and
/// summed here. A device communicator adds through its host_communicator().
double sum_in_rank_order(Communicator& comm, double value);

/// a + b for bf16 values as the bf16 sums above add them: in fp32, rounded to nearest even.
uint16_t add_bf16(uint16_t a, uint16_t b);

/// How this process was started, from the launcher's environment.
struct LaunchInfo {
  bool launched = false;  // started as a rank of a job by an MPI launcher
  std::string launcher;   // "mpirun" (OMPI_COMM_WORLD_SIZE), "PMIx" (PMIX_RANK), "PMI" (PMI_RANK)
  int world_size = 1;     // from the environment when it says (OpenMPI, PMI); else 0 (unknown)
};
LaunchInfo detect_launch();

/// The communicator of this process's job: an MpiCommunicator (MPI initialized here) when
/// detect_launch() says a launcher started it, else a SingleProcessCommunicator (no MPI call at
/// all, so a plain run behaves as if MPI did not exist). Throws gpt2::Error when launched with
/// several ranks by a build without MPI, or as one of several tasks of a Slurm step that has no
/// PMI (srun without --mpi=pmix).
std::unique_ptr<Communicator> make_job_communicator();

/// True when this build has the MPI backend.
bool mpi_backend_available();

/// An NcclCommunicator (parallel/nccl_communicator.h) over the job's host communicator `host`,
/// which must outlive it: collective over the job's ranks, and it selects this rank's GPU.
/// Throws gpt2::Error in a build without NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host);

}  // namespace gpt2
