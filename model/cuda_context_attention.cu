/**
 * @file cuda_context_attention.cu
 * @brief CudaContextAttention (cuda_context_attention.h): gathers, scatters and collectives
 *        around the whole-sequence attention kernels.
 */
#include "model/cuda_context_attention.h"

#include <type_traits>
#include <utility>

#include <cuda_bf16.h>

#include "base/error.h"
#include "kernels/gpu/context.cuh"
#include "kernels/gpu/row_copy.cuh"

namespace gpt2 {
namespace {

using bf16 = __nv_bfloat16;

/// The query rows of a shard: its positions are one or two runs of consecutive positions.
gpu::QueryRows query_rows(const ContextShard& shard) {
  gpu::QueryRows rows;
  const std::vector<int>& p = shard.positions;
  for (size_t i = 0; i < p.size(); ++i) {
    if (i > 0 && p[i] == p[i - 1] + 1) continue;
    GPT2_CHECK(rows.count < 2, "a context shard of more than two runs of positions");
    if (rows.count > 0) rows.end[rows.count - 1] = p[i - 1] + 1;
    rows.begin[rows.count++] = p[i];
  }
  rows.end[rows.count - 1] = p.back() + 1;
  return rows;
}

}  // namespace

std::vector<ContextBufferSpec> context_attention_buffer_specs(const ContextShard& shard, int B,
                                                              int C, int NH, size_t value_bytes) {
  const size_t BT = static_cast<size_t>(B) * shard.seq_len, Cs = C, x = value_bytes;
  const size_t blocks = static_cast<size_t>(shard.size) * B * shard.max_local * 2 * Cs * x;
  const std::string group = str_cat(" (", shard.size, " ranks of up to ", shard.max_local,
                                    " rows, ", shard.seq_len, " positions)");
  return {
      {"attention", "context parallel: the sequence's qkv (B,T,3C)", BT * 3 * Cs * x},
      {"attention", "context parallel: the sequence's attention output (B,T,C)", BT * Cs * x},
      {"attention", "context parallel: the sequence's output gradient (B,T,C)", BT * Cs * x},
      {"attention", "context parallel: the sequence's qkv gradient (B,T,3C)", BT * 3 * Cs * x},
      {"attention", "context parallel: the sequence's log-sum-exp (B,NH,T) fp32",
       BT * NH * sizeof(float)},
      {"attention", "context parallel: keys and values sent (N,B,M,2C)" + group, blocks},
      {"attention", "context parallel: keys and values received (N,B,M,2C)" + group, blocks},
      {"attention", "context parallel: every rank's positions (N,M) int32",
       static_cast<size_t>(shard.size) * shard.max_local * sizeof(int)},
  };
}

template <typename T_>
CudaContextAttention<T_>::CudaContextAttention(Communicator& group, ContextShard shard,
                                               gpu::AttentionConfig config,
                                               const ContextBuffers& buffers, void* workspace,
                                               const gpu::Context& ctx)
    : group_(group), shard_(std::move(shard)), config_(config), buffers_(buffers),
      workspace_(workspace), ctx_(ctx), stream_(ctx.stream()) {
  GPT2_CHECK(group.world_size() == shard_.size && group.rank() == shard_.rank,
             "context group rank ", group.rank(), " of ", group.world_size(), " for shard ",
             shard_.rank, " of ", shard_.size);
  GPT2_CHECK(group.memory_space() == MemorySpace::kDevice, "the CUDA model's context group "
             "needs a device communicator (NCCL), not ", group.backend());
  GPT2_CHECK(config_.T == shard_.seq_len, "context attention at T=", config_.T, " for ",
             shard_.seq_len, " positions");
  config_.rows = query_rows(shard_);
  gpu::check_query_rows(config_.rows, config_.T);
  const int M = shard_.max_local;
  std::vector<int> positions(static_cast<size_t>(shard_.size) * M, 0);
  for (int r = 0; r < shard_.size; ++r) {
    const std::vector<int> rank_positions = context_shard(shard_.seq_len, shard_.size, r).positions;
    lengths_.push_back(static_cast<int>(rank_positions.size()));
    std::copy(rank_positions.begin(), rank_positions.end(),
              positions.begin() + static_cast<std::ptrdiff_t>(r) * M);
  }
  GPT2_CUDA_CHECK(cudaMemcpyAsync(buffers_.positions, positions.data(),
                                  positions.size() * sizeof(int), cudaMemcpyHostToDevice,
                                  stream_));
  // The rows no rank writes stay zero: other ranks' queries, and dout off this rank's rows.
  const size_t BT = static_cast<size_t>(config_.B) * config_.T, C = config_.C;
  const size_t blocks = static_cast<size_t>(shard_.size) * config_.B * M * 2 * C;
  for (const auto& [pointer, elements] :
       {std::pair<void*, size_t>{buffers_.qkv, 3 * BT * C}, {buffers_.out, BT * C},
        {buffers_.dout, BT * C}, {buffers_.dqkv, 3 * BT * C}, {buffers_.send, blocks},
        {buffers_.receive, blocks}})
    GPT2_CUDA_CHECK(cudaMemsetAsync(pointer, 0, elements * sizeof(T_), stream_));
  GPT2_CUDA_CHECK(cudaMemsetAsync(buffers_.lse, 0, BT * config_.NH * sizeof(float), stream_));
  GPT2_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
  GPT2_CUDA_CHECK(cudaEventCreateWithFlags(&group_done_, cudaEventDisableTiming));
  GPT2_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

template <typename T_>
CudaContextAttention<T_>::~CudaContextAttention() {
  if (compute_done_ != nullptr) GPT2_CUDA_CHECK_NOTHROW(cudaEventDestroy(compute_done_));
  if (group_done_ != nullptr) GPT2_CUDA_CHECK_NOTHROW(cudaEventDestroy(group_done_));
}

template <typename T_>
template <typename Collective>
void CudaContextAttention<T_>::on_group_stream(Collective&& collective) {
  cudaStream_t group_stream = group_.device_stream();
  GPT2_CUDA_CHECK(cudaEventRecord(compute_done_, stream_));
  GPT2_CUDA_CHECK(cudaStreamWaitEvent(group_stream, compute_done_, 0));
  collective();
  GPT2_CUDA_CHECK(cudaEventRecord(group_done_, group_stream));
  GPT2_CUDA_CHECK(cudaStreamWaitEvent(stream_, group_done_, 0));
}

template <typename T_>
void CudaContextAttention<T_>::gather_sequence(const T_* qkv) {
  const int64_t B = config_.B, T = config_.T, C = config_.C, M = shard_.max_local;
  const int64_t local = shard_.local_len();
  T_* send = static_cast<T_*>(buffers_.send);
  T_* receive = static_cast<T_*>(buffers_.receive);
  T_* sequence = static_cast<T_*>(buffers_.qkv);
  // This rank's keys and values, (B, T_loc) of (B, M, 2C).
  RowCopy pack;
  pack.outer = B;
  pack.rows = local;
  pack.width = 2 * C;
  pack.dst = {M, 2 * C, 0, nullptr};
  pack.src = {local, 3 * C, C, nullptr};
  gpu::copy_rows(send, qkv, pack, stream_);
  const size_t block = static_cast<size_t>(B * M * 2 * C);
  on_group_stream([&] { group_.all_gather_bytes(send, receive, block * sizeof(T_)); });
  for (int r = 0; r < shard_.size; ++r) {
    RowCopy unpack;
    unpack.outer = B;
    unpack.rows = lengths_[static_cast<size_t>(r)];
    unpack.width = 2 * C;
    unpack.dst = {T, 3 * C, C, buffers_.positions + r * M};
    unpack.src = {M, 2 * C, 0, nullptr};
    gpu::copy_rows(sequence, receive + r * block, unpack, stream_);
  }
  RowCopy queries;
  queries.outer = B;
  queries.rows = local;
  queries.width = C;
  queries.dst = {T, 3 * C, 0, positions()};
  queries.src = {local, 3 * C, 0, nullptr};
  gpu::copy_rows(sequence, qkv, queries, stream_);
}

template <typename T_>
void CudaContextAttention<T_>::forward(const T_* qkv, T_* out, float* lse) {
  const int64_t B = config_.B, T = config_.T, C = config_.C, local = shard_.local_len();
  gather_sequence(qkv);
  gpu::AttentionTensors tensors;
  tensors.qkv = buffers_.qkv;
  tensors.out = buffers_.out;
  tensors.saved = buffers_.lse;
  tensors.workspace = workspace_;
  gpu::attention_forward(config_, tensors, ctx_);
  // This rank's rows of the output and of the log-sum-exp (rows of (B*NH, T)).
  gpu::copy_rows(out, static_cast<const T_*>(buffers_.out),
                 RowCopy{B, local, C, {local, C, 0, nullptr}, {T, C, 0, positions()}}, stream_);
  gpu::copy_rows(lse, buffers_.lse,
                 RowCopy{B * config_.NH, local, 1, {local, 1, 0, nullptr}, {T, 1, 0, positions()}},
                 stream_);
}

template <typename T_>
void CudaContextAttention<T_>::backward(T_* dqkv, const T_* dout, const T_* qkv, const T_* out,
                                        const float* lse) {
  const int64_t B = config_.B, T = config_.T, C = config_.C, M = shard_.max_local;
  const int64_t local = shard_.local_len();
  gather_sequence(qkv);
  const RowCopy to_sequence{B, local, C, {T, C, 0, positions()}, {local, C, 0, nullptr}};
  gpu::copy_rows(static_cast<T_*>(buffers_.out), out, to_sequence, stream_);
  gpu::copy_rows(static_cast<T_*>(buffers_.dout), dout, to_sequence, stream_);
  gpu::copy_rows(buffers_.lse, lse,
                 RowCopy{B * config_.NH, local, 1, {T, 1, 0, positions()}, {local, 1, 0, nullptr}},
                 stream_);
  T_* sequence_dqkv = static_cast<T_*>(buffers_.dqkv);
  // Keys past this rank's last query get no gradient from it (the kernels leave them).
  GPT2_CUDA_CHECK(cudaMemsetAsync(sequence_dqkv, 0, static_cast<size_t>(B * T * 3 * C) * sizeof(T_),
                                  stream_));
  gpu::AttentionTensors tensors;
  tensors.qkv = buffers_.qkv;
  tensors.out = buffers_.out;
  tensors.saved = buffers_.lse;
  tensors.dout = buffers_.dout;
  tensors.dqkv = sequence_dqkv;
  tensors.workspace = workspace_;
  gpu::attention_backward(config_, tensors, ctx_);
  // dQ of this rank's rows.
  gpu::copy_rows(dqkv, static_cast<const T_*>(sequence_dqkv),
                 RowCopy{B, local, C, {local, 3 * C, 0, nullptr}, {T, 3 * C, 0, positions()}},
                 stream_);
  // dK, dV of rank r's rows into block r, summed over the group into this rank's block.
  T_* send = static_cast<T_*>(buffers_.send);
  T_* receive = static_cast<T_*>(buffers_.receive);
  const size_t block = static_cast<size_t>(B * M * 2 * C);
  for (int r = 0; r < shard_.size; ++r) {
    RowCopy pack;
    pack.outer = B;
    pack.rows = lengths_[static_cast<size_t>(r)];
    pack.width = 2 * C;
    pack.dst = {M, 2 * C, 0, nullptr};
    pack.src = {T, 3 * C, C, buffers_.positions + r * M};
    gpu::copy_rows(send + r * block, static_cast<const T_*>(sequence_dqkv), pack, stream_);
  }
  on_group_stream([&] {
    if constexpr (std::is_same_v<T_, bf16>) {
      group_.reduce_scatter_sum_bf16(send, receive, block);
    } else {
      group_.reduce_scatter_sum(send, receive, block);
    }
  });
  gpu::copy_rows(dqkv, static_cast<const T_*>(receive),
                 RowCopy{B, local, 2 * C, {local, 3 * C, C, nullptr}, {M, 2 * C, 0, nullptr}},
                 stream_);
}

template class CudaContextAttention<float>;
template class CudaContextAttention<bf16>;

}  // namespace gpt2
