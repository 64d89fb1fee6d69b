/**
 * @file cuda_data_parallel.h
 * @brief Data parallelism of the CUDA model over a device communicator (NCCL): gradient
 *        reductions in the fixed buckets of parallel/shard_plan.h, overlapped with the backward;
 *        the step's loss and norm summed over the ranks on the device; and (ZeRO-1) the
 *        all-gather of the parameters after each rank updated its shard, overlapped with the
 *        next forward.
 *
 * Streams. Compute runs on the model's stream; every collective, and the conversion of a bf16
 * bucket to fp32 before it, runs in order on the communicator's device_stream(). The two meet
 * only through events, so the whole micro-batch, collectives included, can be captured as one
 * CUDA graph (begin_capture / end_capture / replayed).
 * Buckets. The buffers are in LayerMajorLayout's order and the plan's cuts
 * (LayerMajorLayout::bucket_cuts) keep each layer in buckets of its own, one bucket when it fits
 * --grad-bucket: a backward point's gradients are one collective.
 * Ready points. The backward finishes parameter gradients in this order: point 0, the
 * classifier and the final layernorm (lnf; wte gets only a share); point L - l, transformer
 * layer l (l = L-1 down to 0); point L + 1, the encoder (wte and wpe). A bucket is ready at the
 * largest point of its elements. Buckets are launched in the order (ready point, index), the
 * buckets of one point as one NCCL group: the same on every rank whether or not the reductions
 * overlap the backward, so the collectives match across ranks and a repeated run gives the
 * same bits.
 * Reduced gradients. ZeRO-1: this rank's block of every bucket (ShardPlan::local_elements(), in
 * bucket order); ZeRO-0: the whole padded buffer. In bf16 (Settings::reduce_bf16, bf16
 * gradients only) the gradient buffer is reduced as it is: ZeRO-1 into a bf16 shard, ZeRO-0 in
 * place. In fp32, bf16 gradients are converted first (into the staging bucket for ZeRO-1, into
 * the reduced buffer itself for ZeRO-0); fp32 gradients are reduced from the gradient buffer
 * itself (in place for ZeRO-0, where the reduced buffer is the gradient buffer).
 * Need points (ZeRO-1). The forward reads parameters in this order: point 0, the encoder (wte,
 * wpe) and layer 0's ln1; point l + 1, block l (its own tensors and the next layer's ln1, or
 * lnf after the last). A bucket is needed at the smallest point of its elements. With overlap,
 * the gather waits for the next forward: launch_parameter_gather issues the buckets in the
 * order (need point, index), one NCCL group per point, and the forward waits before each point
 * for that point's groups only. Anything else that reads the parameters first calls
 * complete_parameter_gather.
 * Overlap. When armed (the step's last micro-batch), each backward point launches the buckets
 * that became ready; otherwise finish_reduction() launches them all after the backward.
 * Timing. Events around every collective group on the communication stream give the GPU time
 * inside the collectives (waits for the slowest rank included); events around the compute
 * stream's waits give the exposed part, the time compute stood still for communication. In a
 * graph the events are the graph's own record nodes, counted in the step that replays it.
 */
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include <cuda_runtime.h>

#include "parallel/communicator.h"
#include "parallel/shard_plan.h"
#include "model/parameters.h"

namespace gpt2 {
namespace gpu {
struct StepScalars;  // kernels/gpu/step_scalars.cuh
}  // namespace gpu

/// One contiguous piece of a rank's update: flat elements [flat, flat + count) of one tensor,
/// at [local, local + count) of the rank's optimizer state.
struct UpdateSegment {
  size_t flat = 0;
  size_t local = 0;
  size_t count = 0;
  int tensor = 0;
};

/// The flat buffer's slices (LayerMajorLayout::slices(), offsets in the buffer's order) cut by:
/// ZeRO-1 (sharded), this rank's block of every bucket; otherwise every slice whole,
/// local == flat.
std::vector<UpdateSegment> update_segments(const ShardPlan& plan,
                                           const std::vector<ParameterSlice>& slices,
                                           bool sharded);

/// The backward point after which each bucket's gradients are final (see the file comment).
std::vector<int> bucket_ready_points(const ShardPlan& plan,
                                     const std::vector<ParameterSlice>& slices, int num_layers);

/// The forward point before which each bucket's parameters are read (see the file comment).
std::vector<int> bucket_need_points(const ShardPlan& plan,
                                    const std::vector<ParameterSlice>& slices, int num_layers);

struct DataParallelTiming {
  double collective_ms = 0.0;  // GPU time inside the step's collectives
  double exposed_ms = 0.0;     // time the compute stream waited for them
};

/// A pair of events around work on one stream.
struct TimedSpan {
  cudaEvent_t begin = nullptr;
  cudaEvent_t end = nullptr;
  bool exposed = false;  // a wait of the compute stream; else a collective on the comm stream
};

template <typename T_>
class CudaDataParallel {
 public:
  struct Settings {
    int zero_stage = 0;
    bool reduce_bf16 = false;  // sums in bf16 (T_ = bf16 only)
    bool overlap_reduce = true;  // reductions during the backward
    bool overlap_gather = true;  // (ZeRO-1) parameter gathers during the next forward
  };
  struct Buffers {
    T_* params = nullptr;   // padded_elements
    T_* grads = nullptr;    // padded_elements, zero past N
    void* reduced = nullptr;  // fp32, or bf16 with reduce_bf16: ZeRO-1 local_elements,
                              // ZeRO-0 padded_elements (the gradient buffer when in place)
    float* staging = nullptr;        // ZeRO-1: max_bucket_size fp32
    double* rank_scalars = nullptr;  // 2 * world_size: every rank's (loss_sum, norm_squared)
  };

  /// comm: a device communicator (device_stream() not null) that outlives this object.
  CudaDataParallel(Communicator& comm, const Settings& settings, ShardPlan plan,
                   const LayerMajorLayout& layout, cudaStream_t compute);
  ~CudaDataParallel();
  CudaDataParallel(const CudaDataParallel&) = delete;
  CudaDataParallel& operator=(const CudaDataParallel&) = delete;

  void set_buffers(const Buffers& buffers) { buffers_ = buffers; }
  bool sharded() const { return settings_.zero_stage == 1; }
  bool reduces_in_bf16() const { return settings_.reduce_bf16; }
  const ShardPlan& plan() const { return plan_; }
  Communicator& comm() const { return comm_; }
  /// The reduced gradients (bf16 when reduces_in_bf16(), else fp32) and how many of them are
  /// this rank's (local, or N for ZeRO-0).
  const void* reduced() const { return buffers_.reduced; }
  size_t reduced_count() const {
    return sharded() ? plan_.local_elements() : plan_.num_elements();
  }

  // --- Gradient reduction --------------------------------------------------------------------
  /// A new step: no bucket launched yet, timings restart.
  void begin_step();
  /// The next backward is the step's last: its points launch the buckets as they become ready.
  void arm() { armed_ = settings_.overlap_reduce; }
  bool armed() const { return armed_; }
  /// True once a bucket of this step was launched (its gradients must not change any more).
  bool launched_any() const { return next_ > 0; }
  /// True once finish_reduction ran this step.
  bool reduction_finished() const { return reduction_finished_; }
  /// The backward reached `point`: when armed, launches the buckets ready by then.
  void backward_point(int point);
  /// Launches the buckets not launched yet; the compute stream waits for every reduction.
  void finish_reduction();

  // --- The step's scalars --------------------------------------------------------------------
  /// After the reduction, with this rank's loss_sum and (ZeRO-1: its shard's) norm_squared in
  /// *scalars on the compute stream: both summed over the ranks in rank order, in place
  /// (ZeRO-0: the norm is already the whole gradient's and stays).
  void sum_step_scalars(gpu::StepScalars* scalars);

  // --- Parameters (ZeRO-1) -------------------------------------------------------------------
  /// After this rank's update was enqueued on the compute stream: with overlap, the gather
  /// waits for the next forward (gather_pending()); without, it runs now and the compute
  /// stream waits for it.
  void parameters_updated();
  bool gather_pending() const { return gather_pending_; }
  /// Issues the pending gather on the communication stream (see the file comment): one NCCL
  /// group per need point when the forward waits point by point (by_point), else one in all.
  void launch_parameter_gather(bool by_point = true);
  /// The compute stream waits for the buckets needed by forward point `point`; nothing when no
  /// gather is in flight.
  void wait_parameters(int point);
  /// Launches a pending gather, and the compute stream waits for all of it.
  void complete_parameter_gather();
  /// Every parameter was written whole (set_parameters): nothing is left to gather.
  void discard_parameter_gather() { gather_pending_ = false; }
  /// Collective: every rank's shards of `local` (local_elements fp32 on the device, written on
  /// the compute stream) into `full` (num_elements, host). Synchronizes.
  void gather_to_host(const float* local, float* full);

  // --- CUDA graphs ---------------------------------------------------------------------------
  /// Around the capture of a micro-batch: its timing events become the graph's own.
  void begin_capture();
  std::vector<TimedSpan> end_capture();
  /// A captured micro-batch was launched: its bookkeeping, as its capture left it.
  void replayed(bool gathered, bool armed, const std::vector<TimedSpan>& spans);
  /// Back to the state before a micro-batch whose capture failed (nothing of it ran): its
  /// gather pending again when it had one, nothing launched, armed as it was.
  void restart_micro_batch(bool gather_pending, bool armed);

  /// The step's timing; call after the compute stream was synchronized.
  DataParallelTiming step_timing() const;

 private:
  /// Events of one owner (the eager steps, or one captured graph), reused from step to step.
  class EventPool {
   public:
    ~EventPool();
    cudaEvent_t next();
    void reset() { used_ = 0; }

   private:
    std::vector<cudaEvent_t> events_;
    size_t used_ = 0;
  };

  void launch_through(int point);
  void reduce_bucket(const GradientBucket& bucket);
  /// `waiter` waits for everything issued on `stream` so far; timed (exposed) when asked.
  void wait_for_stream(cudaStream_t waiter, cudaStream_t stream, bool timed);
  void begin_timed(cudaStream_t stream, bool exposed);
  void end_timed(cudaStream_t stream);
  void record(cudaEvent_t event, cudaStream_t stream) const;
  int last_need_point() const { return num_layers_; }

  Communicator& comm_;
  Settings settings_;
  ShardPlan plan_;
  int num_layers_;
  std::vector<int> ready_point_;      // per bucket
  std::vector<size_t> order_;         // buckets by (ready point, index)
  std::vector<int> need_point_;       // per bucket
  std::vector<size_t> gather_order_;  // buckets by (need point, index)
  cudaStream_t compute_;
  cudaStream_t comm_stream_;
  Buffers buffers_;
  size_t next_ = 0;  // order_[0, next_) are launched
  bool armed_ = false;
  bool reduction_finished_ = false;
  bool gather_pending_ = false;    // updated shards not yet gathered
  bool gather_in_flight_ = false;  // launched; the compute stream has not waited for all of it
  int waited_through_ = -1;        // need points the compute stream waited for
  cudaEvent_t signal_ = nullptr;   // untimed, for stream-to-stream waits
  std::vector<cudaEvent_t> need_events_;  // per need point: its gathers landed
  bool capturing_ = false;
  EventPool eager_events_;
  std::vector<std::unique_ptr<EventPool>> capture_events_;  // one per captured graph
  std::vector<TimedSpan> spans_;          // the step's
  std::vector<TimedSpan> capture_spans_;  // the capture's in progress
  cudaEvent_t open_begin_ = nullptr;      // begin_timed's, until end_timed
  bool open_exposed_ = false;
};

}  // namespace gpt2
