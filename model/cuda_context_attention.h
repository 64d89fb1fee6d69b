/**
 * @file cuda_context_attention.h
 * @brief The CUDA model's attention over its context group (model/context_parallel.h's layout):
 *        keys and values all-gathered through NCCL, their gradients reduce-scattered.
 *
 * A rank holds the rows (B, T_loc) of its shard's positions; attention runs on whole-sequence
 * buffers (B, T, ...) in which only this rank's query rows are computed (gpu::QueryRows: its
 * two chunks, on the kernels' tiles since T >= 2N * kContextChunkGranule). Per layer:
 * Forward: this rank's keys and values packed into (B, M, 2C) (M = the group's longest share),
 *   all-gathered into (N, B, M, 2C), every rank's rows scattered into the sequence's qkv
 *   (B, T, 3C) at their positions, with this rank's queries; attention for this rank's rows;
 *   their out (B, T_loc, C) and lse (B, NH, T_loc) copied back.
 * Backward: the same gather (the sequence's keys and values are not kept per layer); this rank's
 *   out, dout and lse into the sequence's buffers (the other rows' dout stays 0, so they add
 *   nothing); attention backward: dQ of this rank's rows, dK and dV of every row from this
 *   rank's queries (rows past its last query zeroed first); dK, dV packed per rank into
 *   (N, B, M, 2C) and reduce-scattered, so this rank receives the group's sum for its rows.
 * Collectives run on the group's stream, ordered after and before the compute stream's work by
 * events, so a CUDA graph captures them. Every buffer is the model's (planned and allocated
 * with the rest; buffer_specs names them).
 */
#pragma once

#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/gpu/attention.cuh"
#include "model/context_parallel.h"
#include "parallel/communicator.h"

namespace gpt2 {

namespace gpu {
class Context;
}

/// One planned buffer of the context attention (group and name for the memory plan).
struct ContextBufferSpec {
  const char* group;
  std::string name;
  size_t bytes;
};

/// The buffers, in ContextBuffers order.
std::vector<ContextBufferSpec> context_attention_buffer_specs(const ContextShard& shard, int B,
                                                              int C, int NH, size_t value_bytes);

/// Device pointers, each of the size its spec says.
struct ContextBuffers {
  void* qkv = nullptr;       // (B,T,3C) the sequence's
  void* out = nullptr;       // (B,T,C)
  void* dout = nullptr;      // (B,T,C)
  void* dqkv = nullptr;      // (B,T,3C)
  float* lse = nullptr;      // (B,NH,T)
  void* send = nullptr;      // (N,B,M,2C)
  void* receive = nullptr;   // (N,B,M,2C)
  int* positions = nullptr;  // (N,M): rank j's positions at j*M
};
constexpr int kNumContextBuffers = 8;

template <typename T_>
class CudaContextAttention {
 public:
  /// config: the attention at the whole (B, T) (T = shard.seq_len), its workspace `workspace`;
  /// group: the ranks of the shard's group (a device communicator); buffers zeroed here; ctx
  /// must outlive this.
  CudaContextAttention(Communicator& group, ContextShard shard, gpu::AttentionConfig config,
                       const ContextBuffers& buffers, void* workspace, const gpu::Context& ctx);
  ~CudaContextAttention();
  CudaContextAttention(const CudaContextAttention&) = delete;
  CudaContextAttention& operator=(const CudaContextAttention&) = delete;

  const ContextShard& shard() const { return shard_; }
  /// This rank's positions on the device (T_loc ints).
  const int* positions() const { return buffers_.positions + shard_.rank * shard_.max_local; }

  /// out (B,T_loc,C), lse (B,NH,T_loc) (=) from this rank's qkv (B,T_loc,3C). Collective.
  void forward(const T_* qkv, T_* out, float* lse);
  /// dqkv (B,T_loc,3C) (=): queries from this rank's rows, keys and values summed over the
  /// group's queries. Collective.
  void backward(T_* dqkv, const T_* dout, const T_* qkv, const T_* out, const float* lse);

 private:
  /// The sequence's qkv: every rank's keys and values, this rank's queries.
  void gather_sequence(const T_* qkv);
  /// The group's stream waits for the compute stream's work so far, and runs `collective`;
  /// the compute stream then waits for it.
  template <typename Collective>
  void on_group_stream(Collective&& collective);

  Communicator& group_;
  ContextShard shard_;
  std::vector<int> lengths_;  // rows of every rank of the group
  gpu::AttentionConfig config_;
  ContextBuffers buffers_;
  void* workspace_;
  const gpu::Context& ctx_;  // the model's: its stream runs everything but the collectives
  cudaStream_t stream_;
  cudaEvent_t compute_done_ = nullptr, group_done_ = nullptr;
};

}  // namespace gpt2
