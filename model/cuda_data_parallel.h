/**
 * @file cuda_data_parallel.h
 * @brief Data parallelism of the CUDA model over a device communicator (NCCL): gradient
 *        reductions in the fixed buckets of dist/shard_plan.h, overlapped with the backward,
 *        and (ZeRO-1) the all-gather of the parameters after each rank updated its shard.
 *
 * Streams. Compute runs on the model's stream; every collective, and the conversion of a bf16
 * bucket to fp32 before it, runs in order on the communicator's device_stream(). The two meet
 * only through events: a bucket's reduction waits for the backward point after which its
 * gradients are final; the compute stream waits for the last reduction before the gradient
 * norm, and for the last all-gather before anything reads the parameters again.
 * Ready points. The backward finishes parameter gradients in this order: point 0, the
 * classifier and the final layernorm (lnf; wte gets only a share); point L - l, transformer
 * layer l (l = L-1 down to 0); point L + 1, the encoder (wte and wpe). A bucket is ready at the
 * largest point of its elements. Buckets are launched in the order (ready point, index): the
 * same on every rank whether or not the reductions overlap the backward, so the collectives
 * match across ranks and a repeated run gives the same bits.
 * Reduced gradients are fp32: ZeRO-1, this rank's block of every bucket (ShardPlan::
 * local_elements(), in bucket order); ZeRO-0, the whole padded buffer. bf16 gradients are
 * converted to fp32 (into the staging bucket for ZeRO-1, into the reduced buffer itself for
 * ZeRO-0) and reduced in fp32, so the sum over the ranks is never rounded to bf16; fp32
 * gradients are reduced from the gradient buffer itself (in place for ZeRO-0, where the reduced
 * buffer is the gradient buffer).
 * Overlap. When armed (the step's last micro-batch), each backward point launches the buckets
 * that became ready; otherwise finish_reduction() launches them all after the backward.
 * Timing. Events around every collective on the communication stream give the GPU time inside
 * the collectives (waits for the slowest rank included); events around the compute stream's
 * waits give the exposed part, the time compute stood still for communication.
 */
#pragma once

#include <cstddef>
#include <vector>

#include <cuda_runtime.h>

#include "dist/communicator.h"
#include "dist/shard_plan.h"
#include "model/parameters.h"

namespace gpt2 {

/// One contiguous piece of a rank's update: flat elements [flat, flat + count) of one tensor,
/// at [local, local + count) of the rank's optimizer state.
struct UpdateSegment {
  size_t flat = 0;
  size_t local = 0;
  size_t count = 0;
  int tensor = 0;
};

/// ZeRO-1 (sharded): this rank's block of every bucket, cut at tensor boundaries; otherwise
/// every tensor whole, local == flat.
std::vector<UpdateSegment> update_segments(const ShardPlan& plan, const ParameterLayout& layout,
                                           bool sharded);

/// The backward point after which each bucket's gradients are final (see the file comment).
std::vector<int> bucket_ready_points(const ShardPlan& plan, const ParameterLayout& layout,
                                     int num_layers);

struct DataParallelTiming {
  double collective_ms = 0.0;  // GPU time inside the step's collectives
  double exposed_ms = 0.0;     // time the compute stream waited for them
};

template <typename T_>
class CudaDataParallel {
 public:
  struct Buffers {
    T_* params = nullptr;      // padded_elements
    T_* grads = nullptr;       // padded_elements, zero past N
    float* reduced = nullptr;  // ZeRO-1: local_elements; ZeRO-0: padded_elements
    float* staging = nullptr;  // ZeRO-1: max_bucket_size
  };

  /// comm: a device communicator (device_stream() not null) that outlives this object.
  CudaDataParallel(Communicator& comm, int zero_stage, ShardPlan plan,
                   const ParameterLayout& layout, int num_layers, cudaStream_t compute);
  ~CudaDataParallel();
  CudaDataParallel(const CudaDataParallel&) = delete;
  CudaDataParallel& operator=(const CudaDataParallel&) = delete;

  void set_buffers(const Buffers& buffers) { buffers_ = buffers; }
  bool sharded() const { return zero_stage_ == 1; }
  const ShardPlan& plan() const { return plan_; }
  Communicator& comm() const { return comm_; }
  /// The reduced gradients and how many of them are this rank's (local, or N for ZeRO-0).
  const float* reduced() const { return buffers_.reduced; }
  size_t reduced_count() const {
    return sharded() ? plan_.local_elements() : plan_.num_elements();
  }

  /// A new step: no bucket launched yet, timings restart.
  void begin_step();
  /// The next backward is the step's last: its points launch the buckets as they become ready.
  void arm() { armed_ = true; }
  /// True once a bucket of this step was launched (its gradients must not change any more).
  bool launched_any() const { return next_ > 0; }
  /// The backward reached `point`: when armed, launches the buckets ready by then.
  void backward_point(int point);
  /// Launches the buckets not launched yet; the compute stream waits for every reduction.
  void finish_reduction();
  /// ZeRO-1, after this rank's update was enqueued on the compute stream: the parameters of
  /// every rank's shards to every rank; the compute stream waits for them.
  void all_gather_parameters();
  /// ZeRO-1, collective: every rank's shards of `local` (local_elements fp32 on the device,
  /// written on the compute stream) into `full` (num_elements, host). Synchronizes.
  void gather_to_host(const float* local, float* full);
  /// The step's timing; call after the compute stream was synchronized.
  DataParallelTiming step_timing() const;

 private:
  void launch_through(int point);
  /// Events: `timed` pairs bracket work on a stream; the compute stream waits for `stream`.
  void wait_for_stream(cudaStream_t waiter, cudaStream_t stream, bool timed_on_waiter);
  void begin_timed(cudaStream_t stream, std::vector<cudaEvent_t>& pool, size_t& used);
  void end_timed(cudaStream_t stream, std::vector<cudaEvent_t>& pool, size_t& used);

  Communicator& comm_;
  int zero_stage_;
  ShardPlan plan_;
  std::vector<int> ready_point_;  // per bucket
  std::vector<size_t> order_;     // buckets by (ready point, index)
  cudaStream_t compute_;
  cudaStream_t comm_stream_;
  Buffers buffers_;
  size_t next_ = 0;  // order_[0, next_) are launched
  bool armed_ = false;
  cudaEvent_t signal_ = nullptr;  // untimed, for stream-to-stream waits
  std::vector<cudaEvent_t> collective_events_, exposed_events_;  // start/end pairs
  size_t collective_used_ = 0, exposed_used_ = 0;
};

}  // namespace gpt2
