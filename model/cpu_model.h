/**
 * @file cpu_model.h
 * @brief The CPU backend: CpuModel, the Model of model.h on CpuGpt2<float> (model/cpu_gpt2.h).
 *
 * It builds its MemoryPlan, checks it against MemAvailable and only then allocates. Data
 * parallel (model.h), with a host communicator: the flat gradient is reduced bucket by bucket
 * in place (ZeRO-0 all-reduce, ZeRO-1 reduce-scatter into this rank's blocks); the last bucket,
 * padded past N, goes through a staging buffer of its size. The norm's part of a rank is the
 * squares of its blocks (ZeRO-0 too, so both stages give the same norm); AdamW runs per tensor
 * on the whole buffer (ZeRO-0) or on this rank's blocks with the moments of its shard (ZeRO-1),
 * followed by the in-place all-gather of the parameters, bucket by bucket. World size 1 runs
 * the single-process code. Context parallel (ModelOptions::context_comm): the CpuGpt2 holds
 * this rank's rows of each sequence, its attention through CpuContextAttention.
 */
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "model/context_parallel.h"
#include "model/cpu_gpt2.h"
#include "model/model.h"

namespace gpt2 {

/// The CPU model's plan (fp32): parameters, gradients, AdamW m and v (ZeRO-1: this rank's
/// shard), every CpuBuffer, the token buffers, and the staging buffer of a padded last bucket
/// (data parallel). Validates the options first (gpt2::Error for a bad config,
/// gpt2::UsageError for a bad B, T, precision or ZeRO stage).
MemoryPlan plan_cpu_model_memory(const ModelOptions& options);

/// The CPU model's buffers beyond CpuGpt2's (cpu_storage_specs, cpu_buffer_specs).
enum CpuModelBuffer : int {
  kCpuAdamM, kCpuAdamV,  // training: N floats each, or this rank's shard (ZeRO-1)
  kCpuBucketStaging,     // data parallel: the padded last bucket, when it runs past N
  kCpuBf16Bucket,        // data parallel with GradReduce::kBf16: one bucket in bf16
  kCpuContextExchange,   // context parallel: CpuContextAttention::buffer_elements
  kNumCpuModelBuffers
};

/// kNumCpuModelBuffers specs indexed by CpuModelBuffer (0 elements: none), from which both
/// the plan and CpuModel's allocations come (the context exchange is allocated by
/// CpuContextAttention, by the same count). The options are assumed valid.
std::vector<CpuBufferSpec> cpu_model_buffer_specs(const ModelOptions& options);

/// Throws gpt2::Error when plan.total() > available_bytes, naming the largest buffer, the bytes
/// it needs and the bytes available. available_bytes == 0 means unknown: no check.
void check_memory_fits(const MemoryPlan& plan, size_t available_bytes, const char* source);

class CpuModel final : public Model {
 public:
  explicit CpuModel(const ModelOptions& options);

  const ModelOptions& options() const override { return options_; }
  DeviceKind device() const override { return DeviceKind::kCpu; }
  std::string device_name() const override;
  std::string attention_kernel() const override { return to_string(options_.attention); }

  void set_parameters(const float* params) override;
  void get_parameters(float* params) const override;

  void zero_grad() override;
  float forward_backward(const int* inputs, const int* targets, float loss_scale) override;
  float evaluate(const int* inputs, const int* targets) override;
  void start_generation(int batch, int max_len) override;
  void prefill(const int* prompts, int length, float* logits) override;
  void decode_step(const int* next_tokens, float* logits) override;
  int generation_length() const override;

  void reduce_gradients() override;
  float grad_norm() override;
  void adamw_step(const AdamWHyper& hyper, int step, float grad_scale) override;

  void get_optimizer_state(float* m, float* v) const override;
  void set_optimizer_state(const float* m, const float* v) override;

  const MemoryPlan& memory_plan() const override { return plan_; }
  size_t peak_memory_bytes() const override;

  /// The underlying reference model (tests, tools).
  CpuGpt2<float>& gpt2() { return *gpt2_; }
  /// The buckets and this rank's shard (data parallel; world size 1: one rank owns all).
  const ShardPlan& shard_plan() const { return shards_; }

 private:
  ModelOptions options_;
  MemoryPlan plan_;
  void check_training(const char* call) const;
  /// Throws unless reduce_gradients() ran since the last gradient change (world size > 1).
  void check_reduced(const char* call) const;
  bool data_parallel() const { return comm_ != nullptr && comm_->world_size() > 1; }
  bool sharded() const { return data_parallel() && options_.zero_stage == 1; }
  /// AdamW on the flat elements [begin, begin + count) with moments m, v (count floats each).
  void adamw_range(size_t begin, size_t count, float* m, float* v, const AdamWHyper& hyper,
                   int step, float grad_scale);
  /// The collective of bucket k on flat (ZeRO-0 all-reduce, ZeRO-1 reduce-scatter, all-gather),
  /// through staging_ when the bucket runs past N; the sums through bf16_bucket_ with
  /// GradReduce::kBf16.
  enum class BucketOp { kAllReduce, kReduceScatter, kAllGather };
  void bucket_collective(BucketOp op, size_t k, float* flat) const;
  /// The sum of bucket k in bf16: flat's elements rounded to bf16, summed over the ranks in
  /// bf16, widened back into flat (ZeRO-1: this rank's block only).
  void bf16_bucket_sum(BucketOp op, size_t k, float* flat) const;
  /// full (N floats) from every rank's local shard (ZeRO-1 optimizer state), bucket by bucket.
  void gather_shards(const float* local, float* full) const;

  std::unique_ptr<CpuGpt2<float>> gpt2_;
  std::unique_ptr<CpuContextAttention> context_;  // context parallelism: attention's group
  std::vector<float> adam_m_, adam_v_;  // N floats each, or this rank's shard (ZeRO-1)
  Communicator* comm_ = nullptr;
  ShardPlan shards_;
  mutable std::vector<float> staging_;  // the padded last bucket (data parallel)
  mutable std::vector<uint16_t> bf16_bucket_;  // one bucket in bf16 (GradReduce::kBf16)
  bool grads_reduced_ = false;
};

}  // namespace gpt2
