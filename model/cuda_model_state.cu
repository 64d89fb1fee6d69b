/**
 * @file cuda_model_state.cu
 * @brief CudaModel<T_>'s construction, host transfers and the CUDA backend's entry points.
 *
 * Construction validates the options and builds the memory plan first; every buffer is then
 * one cudaMalloc of its GpuBufferSpec (cuda_model_plan.cu), and the walk of the plan against the
 * device's free memory names the first buffer that cannot fit before anything is allocated.
 * Parameters, gradients and the AdamW moments cross to and from the host in llm.c's order
 * (ParameterLayout), converted from the device's layer-major order; under ZeRO-1 each rank holds
 * its shard of the fp32 state, and reading it back is collective. The bf16 parameters are
 * rounded from the fp32 master weights on the device (round to nearest even).
 */
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "model/cuda_model_impl.cuh"

namespace gpt2::cuda_model_detail {
namespace {

template <typename To, typename From>
__global__ void convert_kernel(To* out, const From* in, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = gpu::from_float<To>(gpu::to_float(in[i]));
}

template <typename To, typename From>
void convert(To* out, const From* in, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  convert_kernel<<<gpu::grid_size(n, kThreads), kThreads, 0, stream>>>(out, in, n);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T_>
CudaModel<T_>::CudaModel(const ModelOptions& options)
    : options_(options),
      config_(options.config),
      device_layout_(options.config),
      plan_(plan_cuda_model_memory(options)),
      attention_(attention_config(options)),
      classifier_chunk_rows_(classifier_chunk_rows(options)) {
  static_assert(std::is_same_v<T_, float> || std::is_same_v<T_, bf16>);
  constexpr bool kIsBf16 = std::is_same_v<T_, bf16>;
  GPT2_CHECK(bf16_storage(options.precision) == kIsBf16);
  ctx_ = std::make_unique<gpu::Context>();
  if (options.precision == Precision::kFp8) {
    cudaDeviceProp prop{};
    GPT2_CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx_->device()));
    if (prop.major * 10 + prop.minor < 89)
      GPT2_USAGE_FAIL("--precision fp8 needs FP8 tensor cores (sm_89 or newer); ", prop.name,
                      " is sm_", prop.major, prop.minor, " (use --precision bf16)");
  }
  allocate_all(gpu_buffer_specs(options));
  const size_t BT = static_cast<size_t>(options.batch_size) * options.local_seq_len();
  GPT2_CUDA_CHECK(cudaMallocHost(&pinned_tokens_, 2 * BT * sizeof(int)));
  GPT2_CUDA_CHECK(cudaMallocHost(&pinned_scalars_, sizeof(gpu::StepScalars)));
  GPT2_CUDA_CHECK(cudaEventCreateWithFlags(&tokens_copied_, cudaEventDisableTiming));
  GPT2_CUDA_CHECK(cudaMemsetAsync(buffers_[kStepScalars], 0, plan_.items[kStepScalars].bytes,
                                  ctx_->stream()));
  DataParallelShape shape = data_parallel_shape(options);
#ifndef GPT2_SYNC_LAUNCHES  // a synchronize after every launch cannot be captured
  use_graphs_ = options.training && options.cuda_graphs;
#endif
  // This rank's AdamW segments, uploaded once the FP8 weights (if any) can attach their amaxes.
  std::vector<gpu::AdamWSegment> adamw;
  if (options.training) adamw = adamw_segments(shape, device_layout_);
  if (shape.active) {
    typename CudaDataParallel<T_>::Settings settings;
    settings.zero_stage = options.zero_stage;
    settings.reduce_bf16 = shape.reduce_bf16;
    settings.overlap_reduce = options.overlap_communication;
    settings.overlap_gather = options.overlap_gather;
    dp_ = std::make_unique<CudaDataParallel<T_>>(*options.comm, settings, std::move(shape.plan),
                                                 device_layout_, ctx_->stream());
    typename CudaDataParallel<T_>::Buffers dp_buffers;
    dp_buffers.params = buf<T_>(kParams);
    dp_buffers.grads = buf<T_>(kGrads);
    // ZeRO-0 sums in place when the gradient buffer holds the sum's type (no buffer planned).
    dp_buffers.reduced =
        buffers_[kReducedGrads] != nullptr ? buffers_[kReducedGrads] : buffers_[kGrads];
    dp_buffers.staging = buf<float>(kReduceStaging);
    dp_buffers.rank_scalars = buf<double>(kRankScalars);
    dp_->set_buffers(dp_buffers);
    // The padding past N of the parameters is gathered, never read; zero it once.
    GPT2_CUDA_CHECK(cudaMemsetAsync(buffers_[kParams], 0, plan_.items[kParams].bytes,
                                    ctx_->stream()));
  }
  if (options.context_size() > 1) {
    ContextBuffers context;
    context.qkv = buffers_[kContextQkv];
    context.out = buffers_[kContextOut];
    context.dout = buffers_[kContextDout];
    context.dqkv = buffers_[kContextDqkv];
    context.lse = buf<float>(kContextLse);
    context.send = buffers_[kContextSend];
    context.receive = buffers_[kContextReceive];
    context.positions = buf<int>(kContextPositions);
    context_ = std::make_unique<CudaContextAttention<T_>>(
        *options.context_comm,
        context_shard(options.seq_len, options.context_size(), options.context_comm->rank()),
        attention_config(options, true), context, buffers_[kAttWorkspace], *ctx_);
  }
  if constexpr (std::is_same_v<T_, bf16>) {
    const gpu::Fp8DelayedScaling fp8_delayed{options.fp8_amax_history, options.fp8_margin,
                                              options.fp8_gradient_margin};
    if (buffers_[kFp8Weights] != nullptr) {
      Fp8Linears::Buffers fp8;
      fp8.weights = buf<uint8_t>(kFp8Weights);
      fp8.scales = buf<gpu::Fp8ScaleState>(kFp8Scales);
      fp8.operands = buf<uint8_t>(kFp8Operands);
      fp8.inputs = buf<uint8_t>(kFp8Inputs);
      fp8_ = std::make_unique<Fp8Linears>(config_, fp8, BT, *ctx_,
                                          options.fp8_fast_accumulation, fp8_delayed);
    }
    if (buffers_[kFp8Classifier] != nullptr)
      fp8_classifier_ = std::make_unique<Fp8Classifier>(
          config_, buf<uint8_t>(kFp8Classifier), BT, static_cast<size_t>(classifier_chunk_rows_),
          *ctx_, options.fp8_fast_accumulation, options.fp8_classifier_weight_gradient,
          fp8_delayed);
  }
  if (options.training) {
    // AdamW records the FP8 weights' amaxes when it updates every weight here (not ZeRO-1's
    // shards, whose maxima would be partial): the refresh then skips its pass over them.
    if (fp8_ && !shape.sharded)
      GPT2_CHECK(fp8_->attach_weight_amaxes(adamw, device_layout_) ==
                     4 * config_.num_layers,
                 "the FP8 weights are not whole AdamW segments");
    adamw_table_ = gpu::upload_adamw_segments(buffers_[kAdamWSegments], adamw, ctx_->stream());
  }
  for (GpuBuffer id : {kGrads, kAdamM, kAdamV})
    if (buffers_[id] != nullptr)  // absent in an inference-only model
      GPT2_CUDA_CHECK(cudaMemsetAsync(buffers_[id], 0, plan_.items[id].bytes, ctx_->stream()));
  ctx_->synchronize();
  sample_memory();
}

template <typename T_>
CudaModel<T_>::~CudaModel() {
  for (const StepGraph& graph : graphs_)
    if (graph.exec != nullptr) GPT2_CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(graph.exec));
  if (tokens_copied_ != nullptr) GPT2_CUDA_CHECK_NOTHROW(cudaEventDestroy(tokens_copied_));
  if (pinned_scalars_ != nullptr) GPT2_CUDA_CHECK_NOTHROW(cudaFreeHost(pinned_scalars_));
  if (pinned_tokens_ != nullptr) GPT2_CUDA_CHECK_NOTHROW(cudaFreeHost(pinned_tokens_));
  for (void* p : buffers_)
    if (p != nullptr) GPT2_CUDA_CHECK_NOTHROW(cudaFree(p));
}

template <typename T_>
void CudaModel<T_>::allocate_all(const std::vector<GpuBufferSpec>& specs) {
  size_t free_bytes = 0, total_bytes = 0;
  GPT2_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // Walk the plan first: name the first buffer that cannot fit before allocating anything.
  size_t cumulative = 0;
  for (const GpuBufferSpec& spec : specs) {
    cumulative += spec.bytes;
    if (cumulative > free_bytes)
      GPT2_FAIL("out of GPU memory: ", spec.name, " needs ", spec.bytes, " bytes (",
                format_bytes(spec.bytes), ") but only ", free_bytes - (cumulative - spec.bytes),
                " bytes (", format_bytes(free_bytes - (cumulative - spec.bytes)),
                ") are free after the buffers planned before it; the plan needs ",
                plan_.total(), " bytes (", format_bytes(plan_.total()), "), the device has ",
                free_bytes, " bytes (", format_bytes(free_bytes), ") free of ",
                format_bytes(total_bytes), ". Use a smaller --batch-size or --seq-len",
                options_.attention == AttentionKind::kNaive ? ", or --attn flash" : "");
  }
  buffers_.assign(kNumGpuBuffers, nullptr);
  for (int id = 0; id < kNumGpuBuffers; ++id) {
    if (specs[id].bytes == 0) continue;
    const cudaError_t err = cudaMalloc(&buffers_[id], specs[id].bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free allocation error
      size_t now_free = 0;
      (void)cudaMemGetInfo(&now_free, &total_bytes);
      GPT2_FAIL("out of GPU memory allocating ", specs[id].name, ": it needs ", specs[id].bytes,
                " bytes (", format_bytes(specs[id].bytes), ") and ", now_free, " bytes (",
                format_bytes(now_free), ") are free (", cudaGetErrorString(err), ")");
    }
  }
}

template <typename T_>
void CudaModel<T_>::check_training(const char* call) const {
  if (!options_.training)
    GPT2_FAIL(call, " on an inference-only model (built with training off: no gradients or "
              "optimizer state)");
}

template <typename T_>
void CudaModel<T_>::sample_memory() {
  size_t free_bytes = 0, total_bytes = 0;
  GPT2_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  peak_used_bytes_ = std::max(peak_used_bytes_, total_bytes - free_bytes);
}

template <typename T_>
void CudaModel<T_>::upload_local(GpuBuffer id, const float* full) {
  GPT2_CHECK(dp_ && dp_->sharded());
  ctx_->synchronize();
  const ShardPlan& plan = dp_->plan();
  for (size_t k = 0; k < plan.buckets().size(); ++k) {
    const ShardRange range = plan.local_range(k);
    if (range.count > 0)
      GPT2_CUDA_CHECK(cudaMemcpy(buf<float>(id) + range.local, full + range.begin,
                                 range.count * sizeof(float), cudaMemcpyHostToDevice));
  }
}

template <typename T_>
void CudaModel<T_>::set_parameters(const float* llmc_params) {
  const size_t n = device_layout_.total();
  cudaStream_t stream = ctx_->stream();
  if (dp_) dp_->discard_parameter_gather();  // every parameter is written here
  std::vector<float> params(n);
  device_layout_.from_llmc(llmc_params, params.data());
  if (std::is_same_v<T_, bf16> && dp_ && dp_->sharded()) {
    // This rank keeps the master weights of its shard only: the bf16 copy of all of them is
    // rounded here (round to nearest even, as the device rounds).
    std::vector<uint16_t> rounded(n);
    for (size_t i = 0; i < n; ++i) rounded[i] = float_to_bf16_bits(params[i]);
    ctx_->synchronize();
    GPT2_CUDA_CHECK(cudaMemcpy(buffers_[kParams], rounded.data(), n * sizeof(uint16_t),
                               cudaMemcpyHostToDevice));
    upload_local(kMaster, params.data());
    return;
  }
  const GpuBuffer fp32_copy = master_buffer();  // fp32: the parameters themselves
  GPT2_CUDA_CHECK(cudaMemcpy(buffers_[fp32_copy], params.data(), n * sizeof(float),
                             cudaMemcpyHostToDevice));
  if constexpr (std::is_same_v<T_, bf16>)
    convert(buf<bf16>(kParams), buf<float>(kMaster), static_cast<int64_t>(n), stream);
  fp8_weights_stale_ = true;
  fp8_amaxes_recorded_ = false;
  ctx_->synchronize();
}

template <typename T_>
void CudaModel<T_>::get_parameters(float* llmc_params) const {
  const size_t n = device_layout_.total();
  std::vector<float> params(n);
  if (std::is_same_v<T_, bf16> && dp_ && dp_->sharded()) {
    dp_->gather_to_host(buf<float>(kMaster), params.data());  // collective
  } else {
    complete_parameter_gather();  // fp32 ZeRO-1: the parameters are the master weights
    ctx_->synchronize();
    GPT2_CUDA_CHECK(cudaMemcpy(params.data(), buffers_[master_buffer()], n * sizeof(float),
                               cudaMemcpyDeviceToHost));
  }
  device_layout_.to_llmc(params.data(), llmc_params);
}

template <typename T_>
void CudaModel<T_>::get_gradients(float* llmc_grads) const {
  check_training("get_gradients");
  const size_t n = device_layout_.total();
  std::vector<T_> host(n);
  ctx_->synchronize();
  GPT2_CUDA_CHECK(
      cudaMemcpy(host.data(), buffers_[kGrads], n * sizeof(T_), cudaMemcpyDeviceToHost));
  std::vector<float> grads(n);
  for (size_t i = 0; i < n; ++i) grads[i] = host_float(host[i]);
  device_layout_.to_llmc(grads.data(), llmc_grads);
}

template <typename T_>
void CudaModel<T_>::get_losses(float* losses) const {
  ctx_->synchronize();
  GPT2_CUDA_CHECK(cudaMemcpy(losses, buffers_[kLosses],
                             static_cast<size_t>(cur_B_) * cur_T_ * sizeof(float),
                             cudaMemcpyDeviceToHost));
}

template <typename T_>
void CudaModel<T_>::get_residual_gradient(float* dresidual) const {
  check_training("get_residual_gradient");
  const size_t n = static_cast<size_t>(cur_B_) * cur_T_ * config_.channels;
  std::vector<T_> host(n);
  ctx_->synchronize();
  GPT2_CUDA_CHECK(cudaMemcpy(host.data(), buffers_[kDResidual], n * sizeof(T_),
                             cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) dresidual[i] = host_float(host[i]);
}

template <typename T_>
void CudaModel<T_>::get_optimizer_state(float* llmc_m, float* llmc_v) const {
  check_training("get_optimizer_state");
  const size_t n = device_layout_.total();
  std::vector<float> m(n), v(n);
  if (dp_ && dp_->sharded()) {  // collective
    dp_->gather_to_host(buf<float>(kAdamM), m.data());
    dp_->gather_to_host(buf<float>(kAdamV), v.data());
  } else {
    ctx_->synchronize();
    GPT2_CUDA_CHECK(cudaMemcpy(m.data(), buffers_[kAdamM], n * sizeof(float),
                               cudaMemcpyDeviceToHost));
    GPT2_CUDA_CHECK(cudaMemcpy(v.data(), buffers_[kAdamV], n * sizeof(float),
                               cudaMemcpyDeviceToHost));
  }
  device_layout_.to_llmc(m.data(), llmc_m);
  device_layout_.to_llmc(v.data(), llmc_v);
}

template <typename T_>
void CudaModel<T_>::set_optimizer_state(const float* llmc_m, const float* llmc_v) {
  check_training("set_optimizer_state");
  const size_t n = device_layout_.total();
  std::vector<float> m(n), v(n);
  device_layout_.from_llmc(llmc_m, m.data());
  device_layout_.from_llmc(llmc_v, v.data());
  if (dp_ && dp_->sharded()) {
    upload_local(kAdamM, m.data());
    upload_local(kAdamV, v.data());
    return;
  }
  ctx_->synchronize();
  GPT2_CUDA_CHECK(cudaMemcpy(buffers_[kAdamM], m.data(), n * sizeof(float),
                             cudaMemcpyHostToDevice));
  GPT2_CUDA_CHECK(cudaMemcpy(buffers_[kAdamV], v.data(), n * sizeof(float),
                             cudaMemcpyHostToDevice));
}

// The precision state: the block linears' scales, then (--fp8-classifier) the classifier's.
template <typename T_>
std::vector<uint8_t> CudaModel<T_>::precision_state() const {
  if (!fp8_) return {};
  std::vector<uint8_t> bytes = fp8_->save_state();
  if (fp8_classifier_) {
    const std::vector<uint8_t> classifier = fp8_classifier_->save_state();
    bytes.insert(bytes.end(), classifier.begin(), classifier.end());
  }
  return bytes;
}

template <typename T_>
bool CudaModel<T_>::set_precision_state(const std::vector<uint8_t>& bytes) {
  if (!fp8_) return false;
  if (bytes.empty()) return true;
  // A state without the classifier's scales (saved without --fp8-classifier) leaves them
  // fresh; one with them, resumed without, leaves them out.
  const size_t blocks = std::min(bytes.size(), fp8_->state_bytes());
  fp8_->load_state(std::vector<uint8_t>(bytes.begin(), bytes.begin() + blocks));
  if (fp8_classifier_ && bytes.size() > blocks)
    fp8_classifier_->load_state(std::vector<uint8_t>(bytes.begin() + blocks, bytes.end()));
  return true;
}

template class CudaModel<float>;
template class CudaModel<bf16>;

}  // namespace gpt2::cuda_model_detail

namespace gpt2 {

bool cuda_backend_available(std::string* why_not) { return gpu::gpu_available(why_not); }

void select_gpu_of_local_rank(int local_rank) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (count == 1) {
    GPT2_CUDA_CHECK(cudaSetDevice(0));
  } else if (local_rank < count) {
    GPT2_CUDA_CHECK(cudaSetDevice(local_rank));
  }
}

std::unique_ptr<Model> make_cuda_model(const ModelOptions& options) {
  std::string why;
  if (!gpu::gpu_available(&why)) GPT2_FAIL("--device cuda: no usable GPU: ", why);
  using cuda_model_detail::CudaModel;
  if (bf16_storage(options.precision))
    return std::make_unique<CudaModel<cuda_model_detail::bf16>>(options);
  return std::make_unique<CudaModel<float>>(options);
}


}  // namespace gpt2
