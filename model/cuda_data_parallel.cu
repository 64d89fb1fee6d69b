/**
 * @file cuda_data_parallel.cu
 * @brief CudaDataParallel<T_>: bucket reductions, parameter all-gathers and shard gathers on the
 *        communicator's stream, ordered against the compute stream by events.
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

// Events per bucket and step: a start/end pair around its reduction and its all-gather.
constexpr size_t kEventsPerBucket = 4;
constexpr size_t kExposedEvents = 4;  // pairs around the two waits of the compute stream

}  // namespace

std::vector<UpdateSegment> update_segments(const ShardPlan& plan, const ParameterLayout& layout,
                                           bool sharded) {
  std::vector<UpdateSegment> segments;
  const auto cut = [&](size_t begin, size_t count, size_t local) {
    const size_t end = begin + count;
    for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
      const size_t lo = std::max(begin, layout.offsets[tensor]);
      const size_t hi = std::min(end, layout.offsets[tensor] + layout.sizes[tensor]);
      if (lo < hi) segments.push_back({lo, local + (lo - begin), hi - lo, tensor});
    }
  };
  if (!sharded) {
    cut(0, layout.total, 0);
    return segments;
  }
  for (size_t k = 0; k < plan.buckets().size(); ++k) {
    const ShardRange range = plan.local_range(k);
    if (range.count > 0) cut(range.begin, range.count, range.local);
  }
  return segments;
}

std::vector<int> bucket_ready_points(const ShardPlan& plan, const ParameterLayout& layout,
                                     int num_layers) {
  const int L = num_layers;
  // The point of the last element of [lo, hi) of `tensor`: per-layer tensors are (L, ...) with
  // layer l at l * size / L; the backward finishes layer l at point L - l, so the range's
  // lowest layer decides.
  const auto point_of = [&](int tensor, size_t lo) -> int {
    if (tensor == kWte || tensor == kWpe) return L + 1;
    if (tensor == kLnfw || tensor == kLnfb) return 0;
    const size_t per_layer = layout.sizes[tensor] / static_cast<size_t>(L);
    const int layer = static_cast<int>((lo - layout.offsets[tensor]) / per_layer);
    return L - layer;
  };
  std::vector<int> points;
  points.reserve(plan.buckets().size());
  for (const GradientBucket& bucket : plan.buckets()) {
    const size_t end = bucket.begin + bucket.valid;
    int point = 0;
    for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
      const size_t lo = std::max(bucket.begin, layout.offsets[tensor]);
      const size_t hi = std::min(end, layout.offsets[tensor] + layout.sizes[tensor]);
      if (lo < hi) point = std::max(point, point_of(tensor, lo));
    }
    points.push_back(point);
  }
  return points;
}

template <typename T_>
CudaDataParallel<T_>::CudaDataParallel(Communicator& comm, int zero_stage, ShardPlan plan,
                                       const ParameterLayout& layout, int num_layers,
                                       cudaStream_t compute)
    : comm_(comm),
      zero_stage_(zero_stage),
      plan_(std::move(plan)),
      compute_(compute),
      comm_stream_(comm.device_stream()) {
  GPT2_CHECK(comm_stream_ != nullptr, "the CUDA model's data parallelism needs a device "
             "communicator (NCCL), not ", comm.backend());
  GPT2_CHECK(zero_stage == 0 || zero_stage == 1, "ZeRO stage ", zero_stage);
  ready_point_ = bucket_ready_points(plan_, layout, num_layers);
  order_.resize(ready_point_.size());
  std::iota(order_.begin(), order_.end(), size_t{0});
  std::stable_sort(order_.begin(), order_.end(),
                   [&](size_t a, size_t b) { return ready_point_[a] < ready_point_[b]; });
  GPT2_CUDA_CHECK(cudaEventCreateWithFlags(&signal_, cudaEventDisableTiming));
  collective_events_.resize(kEventsPerBucket * plan_.buckets().size());
  exposed_events_.resize(kExposedEvents);
  for (std::vector<cudaEvent_t>* pool : {&collective_events_, &exposed_events_})
    for (cudaEvent_t& event : *pool) GPT2_CUDA_CHECK(cudaEventCreate(&event));
}

template <typename T_>
CudaDataParallel<T_>::~CudaDataParallel() {
  if (signal_ != nullptr) GPT2_CUDA_CHECK_NOTHROW(cudaEventDestroy(signal_));
  for (std::vector<cudaEvent_t>* pool : {&collective_events_, &exposed_events_})
    for (cudaEvent_t event : *pool)
      if (event != nullptr) GPT2_CUDA_CHECK_NOTHROW(cudaEventDestroy(event));
}

template <typename T_>
void CudaDataParallel<T_>::begin_step() {
  next_ = 0;
  armed_ = false;
  collective_used_ = 0;
  exposed_used_ = 0;
}

template <typename T_>
void CudaDataParallel<T_>::begin_timed(cudaStream_t stream, std::vector<cudaEvent_t>& pool,
                                       size_t& used) {
  GPT2_CHECK(used + 2 <= pool.size(), "data-parallel timing events exhausted");
  GPT2_CUDA_CHECK(cudaEventRecord(pool[used], stream));
}

template <typename T_>
void CudaDataParallel<T_>::end_timed(cudaStream_t stream, std::vector<cudaEvent_t>& pool,
                                     size_t& used) {
  GPT2_CUDA_CHECK(cudaEventRecord(pool[used + 1], stream));
  used += 2;
}

template <typename T_>
void CudaDataParallel<T_>::wait_for_stream(cudaStream_t waiter, cudaStream_t stream,
                                           bool timed_on_waiter) {
  GPT2_CUDA_CHECK(cudaEventRecord(signal_, stream));
  if (timed_on_waiter) begin_timed(waiter, exposed_events_, exposed_used_);
  GPT2_CUDA_CHECK(cudaStreamWaitEvent(waiter, signal_, 0));
  if (timed_on_waiter) end_timed(waiter, exposed_events_, exposed_used_);
}

template <typename T_>
void CudaDataParallel<T_>::launch_through(int point) {
  if (next_ == order_.size() || ready_point_[order_[next_]] > point) return;
  wait_for_stream(comm_stream_, compute_, /*timed_on_waiter=*/false);
  for (; next_ < order_.size() && ready_point_[order_[next_]] <= point; ++next_) {
    const GradientBucket& bucket = plan_.buckets()[order_[next_]];
    const float* send = nullptr;
    if constexpr (std::is_same_v<T_, float>) {
      send = buffers_.grads + bucket.begin;  // zero past N: the padding is part of the buffer
    } else {
      float* widened = sharded() ? buffers_.staging : buffers_.reduced + bucket.begin;
      widen_and_pad(widened, buffers_.grads + bucket.begin, bucket.valid, bucket.size,
                    comm_stream_);
      send = widened;
    }
    begin_timed(comm_stream_, collective_events_, collective_used_);
    if (sharded()) {
      comm_.reduce_scatter_sum(send, buffers_.reduced + bucket.local_begin, bucket.shard);
    } else {
      // ZeRO-0 reduces in place: send is the reduced buffer's own range (T_ = float: the
      // gradient buffer, which the reduced pointer aliases).
      comm_.all_reduce(const_cast<float*>(send), bucket.size, ReduceOp::kSum);
    }
    end_timed(comm_stream_, collective_events_, collective_used_);
  }
}

template <typename T_>
void CudaDataParallel<T_>::backward_point(int point) {
  if (armed_) launch_through(point);
}

template <typename T_>
void CudaDataParallel<T_>::finish_reduction() {
  launch_through(std::numeric_limits<int>::max());
  armed_ = false;
  wait_for_stream(compute_, comm_stream_, /*timed_on_waiter=*/true);
}

template <typename T_>
void CudaDataParallel<T_>::all_gather_parameters() {
  GPT2_CHECK(sharded(), "all_gather_parameters is ZeRO-1's");
  wait_for_stream(comm_stream_, compute_, /*timed_on_waiter=*/false);
  const size_t rank = static_cast<size_t>(comm_.rank());
  // One group: NCCL runs every bucket's gather in one launch.
  begin_timed(comm_stream_, collective_events_, collective_used_);
  comm_.begin_group();
  for (const GradientBucket& bucket : plan_.buckets()) {
    T_* data = buffers_.params + bucket.begin;
    comm_.all_gather_bytes(data + rank * bucket.shard, data, bucket.shard * sizeof(T_));
  }
  comm_.end_group();
  end_timed(comm_stream_, collective_events_, collective_used_);
  wait_for_stream(compute_, comm_stream_, /*timed_on_waiter=*/true);
}

template <typename T_>
void CudaDataParallel<T_>::gather_to_host(const float* local, float* full) {
  GPT2_CHECK(sharded(), "gather_to_host is ZeRO-1's");
  GPT2_CHECK(buffers_.staging != nullptr, "no staging bucket");
  wait_for_stream(comm_stream_, compute_, /*timed_on_waiter=*/false);
  for (const GradientBucket& bucket : plan_.buckets()) {
    comm_.all_gather(local + bucket.local_begin, buffers_.staging, bucket.shard);
    GPT2_CUDA_CHECK(cudaMemcpyAsync(full + bucket.begin, buffers_.staging,
                                    bucket.valid * sizeof(float), cudaMemcpyDeviceToHost,
                                    comm_stream_));
    GPT2_CUDA_CHECK(cudaStreamSynchronize(comm_stream_));  // the staging bucket is reused
  }
}

template <typename T_>
DataParallelTiming CudaDataParallel<T_>::step_timing() const {
  const auto total_ms = [](const std::vector<cudaEvent_t>& pool, size_t used) {
    double total = 0.0;
    for (size_t i = 0; i + 1 < used; i += 2) {
      GPT2_CUDA_CHECK(cudaEventSynchronize(pool[i + 1]));
      float ms = 0.0f;
      GPT2_CUDA_CHECK(cudaEventElapsedTime(&ms, pool[i], pool[i + 1]));
      total += ms;
    }
    return total;
  };
  DataParallelTiming timing;
  timing.collective_ms = total_ms(collective_events_, collective_used_);
  timing.exposed_ms = total_ms(exposed_events_, exposed_used_);
  return timing;
}

template class CudaDataParallel<float>;
template class CudaDataParallel<__nv_bfloat16>;

}  // namespace gpt2
