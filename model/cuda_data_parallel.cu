/**
 * @file cuda_data_parallel.cu
 * @brief CudaDataParallel<T_>: bucket reductions, the step scalars' sum, parameter all-gathers
 *        and shard gathers on the communicator's stream, ordered against the compute stream by
 *        events.
 */
#include "model/cuda_data_parallel.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <type_traits>
#include <utility>

#include <cuda_bf16.h>

#include "base/error.h"
#include "kernels/gpu/common.cuh"
#include "kernels/gpu/step_scalars.cuh"

namespace gpt2 {
namespace {

/// out[i] = in[i] as fp32 for i < valid, 0 for valid <= i < size (the padding of the last
/// bucket).
template <typename T_>
__global__ void widen_and_pad_kernel(float* out, const T_* in, int64_t valid, int64_t size) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < size) out[i] = i < valid ? gpu::to_float(in[i]) : 0.0f;
}

template <typename T_>
void widen_and_pad(float* out, const T_* in, size_t valid, size_t size, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const auto n = static_cast<int64_t>(size);
  widen_and_pad_kernel<<<gpu::grid_size(n, kThreads), kThreads, 0, stream>>>(
      out, in, static_cast<int64_t>(valid), n);
  GPT2_CUDA_CHECK_LAUNCH();
}

/// For each bucket, `combine` over the points `point_of(slice)` of the slices it holds, starting
/// from `initial`.
template <typename PointOf, typename Combine>
std::vector<int> bucket_points(const ShardPlan& plan, const std::vector<ParameterSlice>& slices,
                               int initial, PointOf&& point_of, Combine&& combine) {
  std::vector<int> points;
  points.reserve(plan.buckets().size());
  for (const GradientBucket& bucket : plan.buckets()) {
    const size_t end = bucket.begin + bucket.valid;
    int point = initial;
    for (const ParameterSlice& slice : slices)
      if (slice.offset < end && bucket.begin < slice.offset + slice.size)
        point = combine(point, point_of(slice));
    points.push_back(point);
  }
  return points;
}

}  // namespace

std::vector<UpdateSegment> update_segments(const ShardPlan& plan,
                                           const std::vector<ParameterSlice>& slices,
                                           bool sharded) {
  std::vector<UpdateSegment> segments;
  const auto cut = [&](size_t begin, size_t count, size_t local) {
    const size_t end = begin + count;
    for (const ParameterSlice& slice : slices) {
      const size_t lo = std::max(begin, slice.offset);
      const size_t hi = std::min(end, slice.offset + slice.size);
      if (lo < hi) segments.push_back({lo, local + (lo - begin), hi - lo, slice.tensor});
    }
  };
  if (!sharded) {
    for (const ParameterSlice& slice : slices) cut(slice.offset, slice.size, slice.offset);
    return segments;
  }
  for (size_t k = 0; k < plan.buckets().size(); ++k) {
    const ShardRange range = plan.local_range(k);
    if (range.count > 0) cut(range.begin, range.count, range.local);
  }
  return segments;
}

std::vector<int> bucket_ready_points(const ShardPlan& plan,
                                     const std::vector<ParameterSlice>& slices, int num_layers) {
  const int L = num_layers;
  // The backward finishes layer l at point L - l; a bucket waits for its last slice.
  return bucket_points(
      plan, slices, 0,
      [&](const ParameterSlice& slice) {
        if (slice.tensor == kWte || slice.tensor == kWpe) return L + 1;
        if (slice.tensor == kLnfw || slice.tensor == kLnfb) return 0;
        return L - slice.layer;
      },
      [](int a, int b) { return std::max(a, b); });
}

std::vector<int> bucket_need_points(const ShardPlan& plan,
                                    const std::vector<ParameterSlice>& slices, int num_layers) {
  const int L = num_layers;
  // Layer l's ln1 is read at the end of block l - 1 (point l; the encoder's for l = 0), its other
  // tensors by block l (point l + 1); a bucket is needed with its first slice.
  return bucket_points(
      plan, slices, L,
      [&](const ParameterSlice& slice) {
        if (slice.tensor == kWte || slice.tensor == kWpe) return 0;
        if (slice.tensor == kLnfw || slice.tensor == kLnfb) return L;
        return slice.tensor == kLn1w || slice.tensor == kLn1b ? slice.layer : slice.layer + 1;
      },
      [](int a, int b) { return std::min(a, b); });
}

template <typename T_>
CudaDataParallel<T_>::EventPool::~EventPool() {
  for (cudaEvent_t event : events_) GPT2_CUDA_CHECK_NOTHROW(cudaEventDestroy(event));
}

template <typename T_>
cudaEvent_t CudaDataParallel<T_>::EventPool::next() {
  if (used_ == events_.size()) {
    cudaEvent_t event = nullptr;
    GPT2_CUDA_CHECK(cudaEventCreate(&event));
    events_.push_back(event);
  }
  return events_[used_++];
}

template <typename T_>
CudaDataParallel<T_>::CudaDataParallel(Communicator& comm, const Settings& settings,
                                       ShardPlan plan, const LayerMajorLayout& layout,
                                       cudaStream_t compute)
    : comm_(comm),
      settings_(settings),
      plan_(std::move(plan)),
      num_layers_(layout.num_layers()),
      compute_(compute),
      comm_stream_(comm.device_stream()) {
  GPT2_CHECK(comm_stream_ != nullptr, "the CUDA model's data parallelism needs a device "
             "communicator (NCCL), not ", comm.backend());
  GPT2_CHECK(settings.zero_stage == 0 || settings.zero_stage == 1, "ZeRO stage ",
             settings.zero_stage);
  GPT2_CHECK(!settings.reduce_bf16 || (std::is_same_v<T_, __nv_bfloat16>),
             "bf16 gradient sums need bf16 gradients");
  const auto sorted_by = [](const std::vector<int>& points) {
    std::vector<size_t> order(points.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return points[a] < points[b]; });
    return order;
  };
  ready_point_ = bucket_ready_points(plan_, layout.slices(), num_layers_);
  order_ = sorted_by(ready_point_);
  need_point_ = bucket_need_points(plan_, layout.slices(), num_layers_);
  gather_order_ = sorted_by(need_point_);
  GPT2_CUDA_CHECK(cudaEventCreateWithFlags(&signal_, cudaEventDisableTiming));
  need_events_.resize(static_cast<size_t>(last_need_point()) + 1);
  for (cudaEvent_t& event : need_events_)
    GPT2_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
}

template <typename T_>
CudaDataParallel<T_>::~CudaDataParallel() {
  if (signal_ != nullptr) GPT2_CUDA_CHECK_NOTHROW(cudaEventDestroy(signal_));
  for (cudaEvent_t event : need_events_)
    if (event != nullptr) GPT2_CUDA_CHECK_NOTHROW(cudaEventDestroy(event));
}

template <typename T_>
void CudaDataParallel<T_>::begin_step() {
  next_ = 0;
  armed_ = false;
  reduction_finished_ = false;
  eager_events_.reset();
  spans_.clear();
}

template <typename T_>
void CudaDataParallel<T_>::record(cudaEvent_t event, cudaStream_t stream) const {
  // In a capture, an external record is a node of the graph, recorded at each replay.
  GPT2_CUDA_CHECK(cudaEventRecordWithFlags(
      event, stream, capturing_ ? cudaEventRecordExternal : cudaEventRecordDefault));
}

template <typename T_>
void CudaDataParallel<T_>::begin_timed(cudaStream_t stream, bool exposed) {
  GPT2_CHECK(open_begin_ == nullptr, "data-parallel timing spans do not nest");
  open_begin_ = capturing_ ? capture_events_.back()->next() : eager_events_.next();
  open_exposed_ = exposed;
  record(open_begin_, stream);
}

template <typename T_>
void CudaDataParallel<T_>::end_timed(cudaStream_t stream) {
  GPT2_CHECK(open_begin_ != nullptr, "end_timed without begin_timed");
  const TimedSpan span{open_begin_,
                       capturing_ ? capture_events_.back()->next() : eager_events_.next(),
                       open_exposed_};
  record(span.end, stream);
  (capturing_ ? capture_spans_ : spans_).push_back(span);
  open_begin_ = nullptr;
}

template <typename T_>
void CudaDataParallel<T_>::wait_for_stream(cudaStream_t waiter, cudaStream_t stream,
                                           bool timed) {
  GPT2_CUDA_CHECK(cudaEventRecord(signal_, stream));
  if (timed) begin_timed(waiter, /*exposed=*/true);
  GPT2_CUDA_CHECK(cudaStreamWaitEvent(waiter, signal_, 0));
  if (timed) end_timed(waiter);
}

template <typename T_>
void CudaDataParallel<T_>::reduce_bucket(const GradientBucket& bucket) {
  if (settings_.reduce_bf16) {
    // The gradient buffer as the backward left it (zero past N in the padded tail).
    T_* grads = buffers_.grads + bucket.begin;
    if (sharded()) {
      comm_.reduce_scatter_sum_bf16(
          grads, static_cast<T_*>(buffers_.reduced) + bucket.local_begin, bucket.shard);
    } else {
      comm_.all_reduce_sum_bf16(grads, bucket.size);  // in place: reduced is the gradient buffer
    }
    return;
  }
  float* reduced = static_cast<float*>(buffers_.reduced);
  const float* send = nullptr;
  if constexpr (std::is_same_v<T_, float>) {
    send = buffers_.grads + bucket.begin;  // zero past N: the padding is part of the buffer
  } else {
    float* widened = sharded() ? buffers_.staging : reduced + bucket.begin;
    widen_and_pad(widened, buffers_.grads + bucket.begin, bucket.valid, bucket.size,
                  comm_stream_);
    send = widened;
  }
  if (sharded()) {
    comm_.reduce_scatter_sum(send, reduced + bucket.local_begin, bucket.shard);
  } else {
    // ZeRO-0 reduces in place: send is the reduced buffer's own range (T_ = float: the
    // gradient buffer, which the reduced pointer aliases).
    comm_.all_reduce(const_cast<float*>(send), bucket.size, ReduceOp::kSum);
  }
}

template <typename T_>
void CudaDataParallel<T_>::launch_through(int point) {
  if (next_ == order_.size() || ready_point_[order_[next_]] > point) return;
  wait_for_stream(comm_stream_, compute_, /*timed=*/false);
  // One NCCL group per launch, unless bf16 buckets are widened through the one staging bucket
  // (a group would run every widening before the first reduction).
  const bool grouped = settings_.reduce_bf16 || std::is_same_v<T_, float> || !sharded();
  begin_timed(comm_stream_, /*exposed=*/false);
  if (grouped) comm_.begin_group();
  for (; next_ < order_.size() && ready_point_[order_[next_]] <= point; ++next_)
    reduce_bucket(plan_.buckets()[order_[next_]]);
  if (grouped) comm_.end_group();
  end_timed(comm_stream_);
}

template <typename T_>
void CudaDataParallel<T_>::backward_point(int point) {
  if (armed_) launch_through(point);
}

template <typename T_>
void CudaDataParallel<T_>::finish_reduction() {
  launch_through(std::numeric_limits<int>::max());
  armed_ = false;
  reduction_finished_ = true;
  wait_for_stream(compute_, comm_stream_, /*timed=*/true);
}

template <typename T_>
void CudaDataParallel<T_>::sum_step_scalars(gpu::StepScalars* scalars) {
  GPT2_CHECK(buffers_.rank_scalars != nullptr, "no room for the ranks' scalars");
  static_assert(offsetof(gpu::StepScalars, norm_squared) ==
                offsetof(gpu::StepScalars, loss_sum) + sizeof(double));
  wait_for_stream(comm_stream_, compute_, /*timed=*/false);
  begin_timed(comm_stream_, /*exposed=*/false);
  comm_.all_gather_bytes(&scalars->loss_sum, buffers_.rank_scalars, 2 * sizeof(double));
  end_timed(comm_stream_);
  wait_for_stream(compute_, comm_stream_, /*timed=*/true);
  gpu::sum_rank_scalars(scalars, buffers_.rank_scalars, comm_.world_size(), sharded(), compute_);
}

template <typename T_>
void CudaDataParallel<T_>::parameters_updated() {
  if (!sharded()) return;
  gather_pending_ = true;
  if (!settings_.overlap_gather) complete_parameter_gather();
}

template <typename T_>
void CudaDataParallel<T_>::launch_parameter_gather(bool by_point) {
  GPT2_CHECK(sharded(), "the parameter gather is ZeRO-1's");
  if (!gather_pending_) return;
  wait_for_stream(comm_stream_, compute_, /*timed=*/false);
  const size_t rank = static_cast<size_t>(comm_.rank());
  // One NCCL group (one launch) per need point when the forward waits point by point, else one
  // for them all.
  size_t k = 0;
  for (int point = 0; point <= last_need_point(); ++point) {
    const int last_in_group = by_point ? point : last_need_point();
    if (k < gather_order_.size() && need_point_[gather_order_[k]] <= last_in_group) {
      begin_timed(comm_stream_, /*exposed=*/false);
      comm_.begin_group();
      for (; k < gather_order_.size() && need_point_[gather_order_[k]] <= last_in_group; ++k) {
        const GradientBucket& bucket = plan_.buckets()[gather_order_[k]];
        T_* data = buffers_.params + bucket.begin;
        comm_.all_gather_bytes(data + rank * bucket.shard, data, bucket.shard * sizeof(T_));
      }
      comm_.end_group();
      end_timed(comm_stream_);
    }
    GPT2_CUDA_CHECK(cudaEventRecord(need_events_[static_cast<size_t>(point)], comm_stream_));
  }
  gather_pending_ = false;
  gather_in_flight_ = true;
  waited_through_ = -1;
}

template <typename T_>
void CudaDataParallel<T_>::wait_parameters(int point) {
  if (!gather_in_flight_) return;
  point = std::min(point, last_need_point());
  if (point <= waited_through_) return;
  begin_timed(compute_, /*exposed=*/true);
  GPT2_CUDA_CHECK(cudaStreamWaitEvent(compute_, need_events_[static_cast<size_t>(point)], 0));
  end_timed(compute_);
  waited_through_ = point;
  if (point == last_need_point()) gather_in_flight_ = false;
}

template <typename T_>
void CudaDataParallel<T_>::complete_parameter_gather() {
  if (gather_pending_) launch_parameter_gather(/*by_point=*/false);
  wait_parameters(last_need_point());
}

template <typename T_>
void CudaDataParallel<T_>::gather_to_host(const float* local, float* full) {
  GPT2_CHECK(sharded(), "gather_to_host is ZeRO-1's");
  GPT2_CHECK(buffers_.staging != nullptr, "no staging bucket");
  wait_for_stream(comm_stream_, compute_, /*timed=*/false);
  for (const GradientBucket& bucket : plan_.buckets()) {
    comm_.all_gather(local + bucket.local_begin, buffers_.staging, bucket.shard);
    GPT2_CUDA_CHECK(cudaMemcpyAsync(full + bucket.begin, buffers_.staging,
                                    bucket.valid * sizeof(float), cudaMemcpyDeviceToHost,
                                    comm_stream_));
    GPT2_CUDA_CHECK(cudaStreamSynchronize(comm_stream_));  // the staging bucket is reused
  }
}

template <typename T_>
void CudaDataParallel<T_>::begin_capture() {
  GPT2_CHECK(!capturing_, "captures do not nest");
  capture_events_.push_back(std::make_unique<EventPool>());
  capture_spans_.clear();
  capturing_ = true;
}

template <typename T_>
std::vector<TimedSpan> CudaDataParallel<T_>::end_capture() {
  GPT2_CHECK(capturing_, "end_capture without begin_capture");
  capturing_ = false;
  open_begin_ = nullptr;  // a capture that failed half way may leave a span open
  return std::move(capture_spans_);
}

template <typename T_>
void CudaDataParallel<T_>::replayed(bool gathered, bool armed,
                                    const std::vector<TimedSpan>& spans) {
  if (gathered) {
    gather_pending_ = false;
    gather_in_flight_ = false;  // the forward waited for every need point
  }
  if (armed) {
    next_ = order_.size();
    armed_ = false;
    reduction_finished_ = true;
  }
  for (const TimedSpan& span : spans) {
    const bool counted = std::any_of(spans_.begin(), spans_.end(), [&](const TimedSpan& s) {
      return s.begin == span.begin;
    });
    if (!counted) spans_.push_back(span);  // a graph replayed twice in a step counts once
  }
}

template <typename T_>
void CudaDataParallel<T_>::restart_micro_batch(bool gather_pending, bool armed) {
  gather_pending_ = gather_pending;
  gather_in_flight_ = false;
  waited_through_ = -1;
  next_ = 0;
  armed_ = armed;
  reduction_finished_ = false;
}

template <typename T_>
DataParallelTiming CudaDataParallel<T_>::step_timing() const {
  DataParallelTiming timing;
  for (const TimedSpan& span : spans_) {
    GPT2_CUDA_CHECK(cudaEventSynchronize(span.end));
    float ms = 0.0f;
    GPT2_CUDA_CHECK(cudaEventElapsedTime(&ms, span.begin, span.end));
    (span.exposed ? timing.exposed_ms : timing.collective_ms) += ms;
  }
  return timing;
}

template class CudaDataParallel<float>;
template class CudaDataParallel<__nv_bfloat16>;

}  // namespace gpt2
