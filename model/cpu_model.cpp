/**
 * @file cpu_model.cpp
 * @brief CpuModel: the CPU backend's plan, data parallelism and AdamW around CpuGpt2.
 */
#include "model/cpu_model.h"

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/bf16.h"
#include "base/error.h"
#include "base/file_io.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/global_norm.h"

namespace gpt2 {

MemoryPlan plan_cpu_model_memory(const ModelOptions& options) {
  const ModelConfig& config = options.config;
  validate_config(config);
  if (options.batch_size < 1) GPT2_USAGE_FAIL("batch size must be >= 1 (got ", options.batch_size, ")");
  if (options.seq_len < 1 || options.seq_len > config.max_seq_len)
    GPT2_USAGE_FAIL("sequence length must be in [1, maxT=", config.max_seq_len, "] (got ",
                    options.seq_len, ")");
  if (options.precision != Precision::kFp32)
    GPT2_USAGE_FAIL("precision ", to_string(options.precision),
                    " is not available on the CPU backend (it computes in fp32)");
  if (options.zero_stage != 0 && options.zero_stage != 1)
    GPT2_USAGE_FAIL("ZeRO stage must be 0 or 1 (got ", options.zero_stage, ")");
  if (options.comm != nullptr && options.comm->memory_space() != MemorySpace::kHost)
    GPT2_FAIL("the CPU model needs a host communicator, not ", options.comm->backend());
  const bool context_parallel = options.context_size() > 1;
  if (context_parallel && options.attention != AttentionKind::kFlash)
    GPT2_USAGE_FAIL("context parallelism needs --attn flash: naive attention exists to "
                    "materialize each sequence's whole T x T scores, which no rank holds");
  // Every item comes from a spec list its allocation reads too: CpuGpt2's storage and buffers
  // (cpu_storage_specs, cpu_buffer_specs), this model's own (cpu_model_buffer_specs).
  const int B = options.batch_size, T = options.local_seq_len();
  const std::vector<CpuBufferSpec> storage =
      cpu_storage_specs(config, B, T, options.training, context_parallel);
  const std::vector<CpuBufferSpec> own = cpu_model_buffer_specs(options);
  MemoryPlan plan;
  const auto add = [&plan](const CpuBufferSpec& spec) {
    if (spec.elements > 0) plan.add(spec.group, spec.name, spec.bytes());
  };
  add(storage[kStoreParams]);
  add(storage[kStoreGrads]);
  for (int id : {kCpuAdamM, kCpuAdamV, kCpuBucketStaging, kCpuBf16Bucket}) add(own[id]);
  for (const CpuBufferSpec& spec : cpu_buffer_specs(config, B, T, options.attention,
                                                    options.training))
    add(spec);
  add(own[kCpuContextExchange]);
  add(storage[kStoreWpeRows]);
  add(storage[kStoreTokens]);
  return plan;
}

std::vector<CpuBufferSpec> cpu_model_buffer_specs(const ModelOptions& options) {
  const ModelConfig& config = options.config;
  const size_t num_params = ParameterLayout::for_config(config).total;
  const int world = options.world_size();
  std::vector<CpuBufferSpec> specs(kNumCpuModelBuffers);
  if (options.training) {
    specs[kCpuAdamM] = {"optimizer", "AdamW m (fp32)", num_params};
    specs[kCpuAdamV] = {"optimizer", "AdamW v (fp32)", num_params};
  }
  if (options.training && world > 1) {
    const ShardPlan shards = gradient_bucket_plan(config, DeviceKind::kCpu,
                                                  options.bucket_elements, world,
                                                  options.comm->rank());
    if (options.zero_stage == 1) {
      const std::string shard = str_cat("ZeRO-1 shard, ", shards.local_elements(), " of ",
                                        num_params, ")");
      specs[kCpuAdamM] = {"optimizer", "AdamW m (fp32, " + shard, shards.local_elements()};
      specs[kCpuAdamV] = {"optimizer", "AdamW v (fp32, " + shard, shards.local_elements()};
    }
    const GradientBucket& last = shards.buckets().back();
    if (last.size > last.valid)
      specs[kCpuBucketStaging] = {"workspace", "data-parallel staging of the padded last bucket",
                                  last.size};
    if (options.grad_reduce == GradReduce::kBf16)
      specs[kCpuBf16Bucket] = {"workspace", "data-parallel bucket in bf16 (--grad-reduce bf16)",
                               shards.max_bucket_size(), sizeof(uint16_t)};
  }
  if (options.context_size() > 1) {
    const ContextShard shard =
        context_shard(options.seq_len, options.context_size(), options.context_comm->rank());
    specs[kCpuContextExchange] = {
        "attention",
        str_cat("context parallel: the group's keys and values, sent, received and whole (",
                shard.size, " ranks of up to ", shard.max_local, " of ", shard.seq_len,
                " positions)"),
        CpuContextAttention::buffer_elements(shard, options.batch_size, config.channels)};
  }
  return specs;
}

void check_memory_fits(const MemoryPlan& plan, size_t available_bytes, const char* source) {
  if (available_bytes == 0 || plan.total() <= available_bytes) return;
  const MemoryItem* largest = nullptr;
  for (const MemoryItem& item : plan.items)
    if (!largest || item.bytes > largest->bytes) largest = &item;
  GPT2_FAIL("not enough CPU memory: the model needs ", plan.total(), " bytes (",
            format_bytes(plan.total()), ") in total but only ", available_bytes, " bytes (",
            format_bytes(available_bytes), ") are free (", source, "); the largest buffer, ",
            largest->name, ", needs ", largest->bytes, " bytes (", format_bytes(largest->bytes),
            ")");
}

CpuModel::CpuModel(const ModelOptions& options)
    : options_(options), plan_(plan_cpu_model_memory(options)) {
  check_memory_fits(plan_, available_host_memory_bytes(), "MemAvailable in /proc/meminfo");
  const std::vector<CpuBufferSpec> own = cpu_model_buffer_specs(options);
  gpt2_ = std::make_unique<CpuGpt2<float>>(options.config, options.batch_size,
                                           options.local_seq_len(), options.attention,
                                           cpu::FlashBlocks{}, options.training);
  if (options.context_size() > 1) {
    const ModelConfig& config = options.config;
    context_ = std::make_unique<CpuContextAttention>(
        *options.context_comm,
        context_shard(options.seq_len, options.context_size(), options.context_comm->rank()),
        options.batch_size, config.channels, config.num_heads);
    SequenceShare<float> share;
    share.positions = context_->shard().positions;
    share.seq_len = options.seq_len;
    share.attend = [this](float* out, float* lse, const float* qkv) {
      context_->forward(out, lse, qkv);
    };
    share.attend_backward = [this](float* dqkv, const float* dout, const float* qkv,
                                   const float* out, const float* lse) {
      context_->backward(dqkv, dout, qkv, out, lse);
    };
    gpt2_->share_sequences(std::move(share));
  }
  if (options.training) {
    const int world = options.world_size();
    comm_ = options.comm;
    shards_ = gradient_bucket_plan(options.config, DeviceKind::kCpu, options.bucket_elements,
                                   world, comm_ != nullptr ? comm_->rank() : 0);
    allocate(adam_m_, own[kCpuAdamM].elements, own[kCpuAdamM].name);
    allocate(adam_v_, own[kCpuAdamV].elements, own[kCpuAdamV].name);
    allocate(staging_, own[kCpuBucketStaging].elements, own[kCpuBucketStaging].name);
    allocate(bf16_bucket_, own[kCpuBf16Bucket].elements, own[kCpuBf16Bucket].name);
  }
}

void CpuModel::check_reduced(const char* call) const {
  if (data_parallel() && !grads_reduced_)
    GPT2_FAIL(call, " before reduce_gradients(): with ", comm_->world_size(),
              " ranks the gradients are summed over the ranks first");
}

void CpuModel::check_training(const char* call) const {
  if (!options_.training)
    GPT2_FAIL(call, " on an inference-only model (built with training off: no gradients or "
              "optimizer state)");
}

std::string CpuModel::device_name() const {
  return str_cat("CPU (", omp_get_max_threads(), " threads)");
}

void CpuModel::set_parameters(const float* params) {
  std::copy(params, params + gpt2_->num_parameters(), gpt2_->params());
}

void CpuModel::get_parameters(float* params) const {
  const CpuGpt2<float>& model = *gpt2_;
  std::copy(model.params(), model.params() + model.num_parameters(), params);
}

void CpuModel::zero_grad() {
  gpt2_->zero_grad();
  grads_reduced_ = false;
}

float CpuModel::forward_backward(const int* inputs, const int* targets, float loss_scale) {
  check_training("forward_backward");
  GPT2_CHECK(targets != nullptr);
  grads_reduced_ = false;
  const float loss = gpt2_->forward(inputs, targets);
  gpt2_->backward(loss_scale);
  return loss;
}

float CpuModel::evaluate(const int* inputs, const int* targets) {
  GPT2_CHECK(targets != nullptr);
  return gpt2_->forward(inputs, targets);
}

void CpuModel::start_generation(int batch, int max_len) {
  gpt2_->start_generation(batch, max_len);
}

namespace {
// (B,Vp) rows -> (B,V): the padding columns dropped.
void copy_logits(float* out, const float* logits, int B, int V, int Vp) {
  for (size_t b = 0; b < static_cast<size_t>(B); ++b)
    std::copy(logits + b * Vp, logits + b * Vp + V, out + b * V);
}
}  // namespace

void CpuModel::prefill(const int* prompts, int length, float* logits) {
  const float* rows = gpt2_->prefill(prompts, length);
  copy_logits(logits, rows, gpt2_->generation_batch_size(), options_.config.vocab_size,
              options_.config.padded_vocab_size);
}

void CpuModel::decode_step(const int* next_tokens, float* logits) {
  const float* rows = gpt2_->decode_step(next_tokens);
  copy_logits(logits, rows, gpt2_->generation_batch_size(), options_.config.vocab_size,
              options_.config.padded_vocab_size);
}

int CpuModel::generation_length() const { return gpt2_->generation_length(); }

void CpuModel::bf16_bucket_sum(BucketOp op, size_t k, float* flat) const {
  const GradientBucket& bucket = shards_.buckets()[k];
  const size_t own = static_cast<size_t>(comm_->rank()) * bucket.shard;
  float* data = flat + bucket.begin;
  uint16_t* bits = bf16_bucket_.data();
  for (size_t i = 0; i < bucket.size; ++i)
    bits[i] = i < bucket.valid ? float_to_bf16_bits(data[i]) : 0;  // zero in the padded tail
  size_t first = 0, count = bucket.valid;  // the widened range of the bucket
  if (op == BucketOp::kAllReduce) {
    comm_->all_reduce_sum_bf16(bits, bucket.size);
  } else {
    comm_->reduce_scatter_sum_bf16(bits, bits + own, bucket.shard);
    first = own;
    count = own < bucket.valid ? std::min(bucket.shard, bucket.valid - own) : 0;
  }
  for (size_t i = first; i < first + count; ++i) data[i] = bf16_bits_to_float(bits[i]);
}

void CpuModel::bucket_collective(BucketOp op, size_t k, float* flat) const {
  if (op != BucketOp::kAllGather && options_.grad_reduce == GradReduce::kBf16)
    return bf16_bucket_sum(op, k, flat);
  const GradientBucket& bucket = shards_.buckets()[k];
  const size_t own = static_cast<size_t>(comm_->rank()) * bucket.shard;
  // The last bucket runs past N: it goes through staging_, zero past the valid elements.
  const bool staged = bucket.size > bucket.valid;
  float* data = flat + bucket.begin;
  if (staged) {
    std::copy(data, data + bucket.valid, staging_.begin());
    std::fill(staging_.begin() + static_cast<std::ptrdiff_t>(bucket.valid), staging_.end(), 0.0f);
    data = staging_.data();
  }
  switch (op) {
    case BucketOp::kAllReduce: comm_->all_reduce(data, bucket.size, ReduceOp::kSum); break;
    case BucketOp::kReduceScatter: comm_->reduce_scatter_sum(data, data + own, bucket.shard); break;
    case BucketOp::kAllGather: comm_->all_gather(data + own, data, bucket.shard); break;
  }
  if (!staged) return;
  if (op == BucketOp::kReduceScatter) {
    // Only this rank's block holds the sum; the rest of the bucket is unspecified anyway.
    if (own < bucket.valid) {
      const size_t count = std::min(bucket.shard, bucket.valid - own);
      std::copy(data + own, data + own + count, flat + bucket.begin + own);
    }
  } else {
    std::copy(data, data + bucket.valid, flat + bucket.begin);
  }
}

void CpuModel::gather_shards(const float* local, float* full) const {
  for (size_t k = 0; k < shards_.buckets().size(); ++k) {
    const GradientBucket& bucket = shards_.buckets()[k];
    if (bucket.size == bucket.valid) {
      comm_->all_gather(local + bucket.local_begin, full + bucket.begin, bucket.shard);
    } else {
      comm_->all_gather(local + bucket.local_begin, staging_.data(), bucket.shard);
      std::copy(staging_.begin(), staging_.begin() + static_cast<std::ptrdiff_t>(bucket.valid),
                full + bucket.begin);
    }
  }
}

void CpuModel::reduce_gradients() {
  check_training("reduce_gradients");
  if (data_parallel()) {
    const BucketOp op = sharded() ? BucketOp::kReduceScatter : BucketOp::kAllReduce;
    for (size_t k = 0; k < shards_.buckets().size(); ++k) bucket_collective(op, k, gpt2_->grads());
  }
  grads_reduced_ = true;
}

float CpuModel::grad_norm() {
  check_training("grad_norm");
  if (!data_parallel()) {
    return static_cast<float>(std::sqrt(cpu::global_norm_squared(
        gpt2_->grads(), static_cast<int64_t>(gpt2_->num_parameters()))));
  }
  check_reduced("grad_norm");
  double local = 0.0;
  for (size_t k = 0; k < shards_.buckets().size(); ++k) {
    const ShardRange range = shards_.local_range(k);
    if (range.count > 0)
      local += cpu::global_norm_squared(gpt2_->grads() + range.begin,
                                        static_cast<int64_t>(range.count));
  }
  return static_cast<float>(std::sqrt(sum_in_rank_order(*comm_, local)));
}

void CpuModel::adamw_range(size_t begin, size_t count, float* m, float* v,
                           const AdamWHyper& hyper, int step, float grad_scale) {
  const ParameterLayout& layout = gpt2_->layout();
  const size_t end = begin + count;
  for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
    const size_t lo = std::max(begin, layout.offsets[tensor]);
    const size_t hi = std::min(end, layout.offsets[tensor] + layout.sizes[tensor]);
    if (lo >= hi) continue;
    AdamWHyper tensor_hyper = hyper;
    if (!ParameterLayout::decays(tensor)) tensor_hyper.weight_decay = 0.0f;
    cpu::adamw_update(gpt2_->params() + lo, gpt2_->grads() + lo, m + (lo - begin),
                      v + (lo - begin), static_cast<int64_t>(hi - lo), tensor_hyper, step,
                      grad_scale);
  }
}

void CpuModel::adamw_step(const AdamWHyper& hyper, int step, float grad_scale) {
  check_training("adamw_step");
  GPT2_CHECK(step >= 1, "AdamW steps are 1-based (got ", step, ")");
  check_reduced("adamw_step");
  if (!sharded()) {
    adamw_range(0, gpt2_->num_parameters(), adam_m_.data(), adam_v_.data(), hyper, step,
                grad_scale);
    return;
  }
  for (size_t k = 0; k < shards_.buckets().size(); ++k) {
    const ShardRange range = shards_.local_range(k);
    if (range.count > 0)
      adamw_range(range.begin, range.count, adam_m_.data() + range.local,
                  adam_v_.data() + range.local, hyper, step, grad_scale);
  }
  for (size_t k = 0; k < shards_.buckets().size(); ++k)
    bucket_collective(BucketOp::kAllGather, k, gpt2_->params());
}

void CpuModel::get_optimizer_state(float* m, float* v) const {
  check_training("get_optimizer_state");
  if (sharded()) {
    gather_shards(adam_m_.data(), m);
    gather_shards(adam_v_.data(), v);
    return;
  }
  std::copy(adam_m_.begin(), adam_m_.end(), m);
  std::copy(adam_v_.begin(), adam_v_.end(), v);
}

void CpuModel::set_optimizer_state(const float* m, const float* v) {
  check_training("set_optimizer_state");
  if (sharded()) {
    for (size_t k = 0; k < shards_.buckets().size(); ++k) {
      const ShardRange range = shards_.local_range(k);
      std::copy(m + range.begin, m + range.begin + range.count, adam_m_.begin() + range.local);
      std::copy(v + range.begin, v + range.begin + range.count, adam_v_.begin() + range.local);
    }
    return;
  }
  std::copy(m, m + adam_m_.size(), adam_m_.begin());
  std::copy(v, v + adam_v_.size(), adam_v_.begin());
}

size_t CpuModel::peak_memory_bytes() const {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<size_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::unique_ptr<Model> make_cpu_model(const ModelOptions& options) {
  return std::make_unique<CpuModel>(options);
}

}  // namespace gpt2
