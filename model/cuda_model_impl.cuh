/**
 * @file cuda_model_impl.cuh
 * @brief CudaModel<T_> (T_ = bf16 | fp32), the CUDA backend's class, and its buffer names;
 *        internal to model/cuda_model*.cu (the public interface is model/cuda_model.h).
 *
 * Every device buffer is one cudaMalloc named by its memory-plan item (GpuBuffer, planned by
 * gpu_buffer_specs in cuda_model_plan.cu before anything is allocated). The parameters, their
 * gradients and the optimizer state are in layer-major order on the device (parameters.h);
 * every host interface converts to and from llm.c's. Everything runs on the Context's stream;
 * methods that return host values synchronize. The member functions are defined in:
 *   cuda_model_state.cu       construction, allocation, host transfers, the backend's entry
 *   cuda_model.cu             forward, backward, evaluation and the optimizer step
 *   cuda_model_graph.cu       the training forward + backward, captured as CUDA graphs
 *   cuda_model_generation.cu  generation with a key/value cache
 * each of which instantiates the class for float and bf16.
 */
#pragma once

#include "model/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "base/bf16.h"
#include "base/error.h"
#include "kernels/gpu/adamw.cuh"
#include "kernels/gpu/attention.cuh"
#include "kernels/gpu/attention_decode.cuh"
#include "kernels/gpu/common.cuh"
#include "kernels/gpu/context.cuh"
#include "kernels/gpu/crossentropy.cuh"
#include "kernels/gpu/encoder.cuh"
#include "kernels/gpu/global_norm.cuh"
#include "kernels/gpu/layernorm.cuh"
#include "kernels/gpu/layernorm_fp8.cuh"
#include "kernels/gpu/matmul.cuh"
#include "kernels/gpu/residual.cuh"
#include "kernels/gpu/row_copy.cuh"
#include "kernels/gpu/step_scalars.cuh"
#include "model/context_parallel.h"
#include "model/cuda_context_attention.h"
#include "model/cuda_data_parallel.h"
#include "model/cuda_fp8_classifier.cuh"
#include "model/cuda_fp8_linears.cuh"
#include "model/parameters.h"

namespace gpt2::cuda_model_detail {

using bf16 = __nv_bfloat16;

// Every device buffer of the model, in allocation (and plan) order.
enum GpuBuffer : int {
  kParams, kMaster, kGrads, kAdamM, kAdamV, kAdamWSegments, kReducedGrads, kReduceStaging,
  kRankScalars,
  kEncoded, kLn1, kLn1Mean, kLn1Rstd, kQkv, kLn2, kLn2Mean, kLn2Rstd, kFch, kFchGelu,
  kResidual2, kResidual3, kLnf, kLnfMean, kLnfRstd, kLogits, kLosses,
  kAtty, kAttSaved, kAttWorkspace, kDecodePartials,
  kProj, kDLnf, kDResidual,
  // Context parallelism only (ContextBuffers' order), then wpe's rows at this rank's positions.
  kContextQkv, kContextOut, kContextDout, kContextDqkv, kContextLse, kContextSend,
  kContextReceive, kContextPositions, kWpeRows, kDWpeRows,
  kMatmulScratch, kLayernormScratch, kEncoderScratch, kNormPartials, kNormResult, kStepScalars,
  kFp8Weights, kFp8Scales, kFp8Inputs, kFp8Operands,  // --precision fp8 (cuda_fp8_linears.cuh)
  kFp8Classifier,                                     // --fp8-classifier (cuda_fp8_classifier.cuh)
  kInputs, kTargets,
  kNumGpuBuffers
};

// The kStepScalars buffer: the training step's, and evaluate's (so that a validation pass
// between micro-batches leaves the step's loss sum alone).
enum StepScalarsSlot : int { kTrainingScalars, kEvaluationScalars, kNumStepScalars };

struct GpuBufferSpec {
  const char* group = "";
  std::string name;
  size_t bytes = 0;
};

/// How a training model's parameters are spread over the ranks of a device communicator
/// (model/cuda_data_parallel.h); `active` false: the plain single-GPU model.
struct DataParallelShape {
  bool active = false;
  bool sharded = false;      // ZeRO-1
  bool reduce_bf16 = false;  // the sums in bf16 (GradReduce::kBf16)
  ShardPlan plan;
  size_t padded = 0;  // elements of the parameter and gradient buffers (the last bucket's tail)
  size_t local = 0;   // elements of the optimizer state (master weights, m, v) on this rank
};

/// Data parallel over a device communicator (NCCL) for a training model.
bool uses_device_collectives(const ModelOptions& options);
DataParallelShape data_parallel_shape(const ModelOptions& options);
/// What one AdamW launch updates: this rank's segments of the parameters (every slice of the
/// layout whole without data parallel or with ZeRO-0), each with its tensor's weight decay.
std::vector<gpu::AdamWSegment> adamw_segments(const DataParallelShape& dp,
                                              const LayerMajorLayout& layout);

/// The attention of a model at its full (B, T) (context parallel: this rank's rows; whole:
/// the sequences'); the kernel is chosen here, once.
gpu::AttentionConfig attention_config(const ModelOptions& options, bool whole = false);

/// kNumGpuBuffers specs indexed by GpuBuffer (zero bytes: not allocated for these options).
std::vector<GpuBufferSpec> gpu_buffer_specs(const ModelOptions& options);

/// Throws gpt2::Error (a usage error where the options are the user's) for options the CUDA
/// model cannot run.
void validate_cuda_options(const ModelOptions& options);

inline float host_float(float x) { return x; }
inline float host_float(bf16 x) {
  const __nv_bfloat16_raw raw = x;
  return bf16_bits_to_float(raw.x);
}

// ---------------------------------------------------------------------------------------------

/// What one transformer block reads and writes: rows (B,T) of the model's buffers.
template <typename T_>
struct BlockActivations {
  const T_* residual = nullptr;  // the block's input (B,T,C)
  T_* ln1 = nullptr;             // (B,T,C)
  float* ln1_mean = nullptr;     // (B,T)
  float* ln1_rstd = nullptr;
  T_* qkv = nullptr;  // (B,T,3C)
  T_* atty = nullptr;  // (B,T,C), written by the attention step
  T_* residual2 = nullptr;
  T_* ln2 = nullptr;
  float* ln2_mean = nullptr;
  float* ln2_rstd = nullptr;
  T_* fch = nullptr;       // (B,T,4C)
  T_* fch_gelu = nullptr;  // (B,T,4C)
  T_* residual3 = nullptr;  // the block's output (B,T,C)
  T_* proj = nullptr;       // attproj / fcproj output (B,T,C), shared
};

/// A LayerNorm before a block linear or the classifier: the next block's ln1 or lnf, fused with
/// a block's final residual add (out == nullptr: none, the add alone), or a block's ln2. With
/// codes set (codes.scale != nullptr; --precision fp8's training passes) it writes its output
/// as that linear's FP8 input codes instead of to out (gpu::layernorm_forward_fp8).
template <typename T_>
struct FollowingLayerNorm {
  T_* out = nullptr;
  float* mean = nullptr;
  float* rstd = nullptr;
  const T_* weight = nullptr;
  const T_* bias = nullptr;
  gpu::Fp8Destination codes = {};
};

// ---------------------------------------------------------------------------------------------

template <typename T_>
class CudaModel final : public CudaModelBase {
 public:
  explicit CudaModel(const ModelOptions& options);
  ~CudaModel() override;

  const ModelOptions& options() const override { return options_; }
  DeviceKind device() const override { return DeviceKind::kCuda; }
  std::string device_name() const override { return ctx_->device_name(); }
  std::string attention_kernel() const override { return gpu::to_string(attention_.kernel); }

  void set_parameters(const float* params) override;
  void get_parameters(float* params) const override;
  void get_gradients(float* grads) const override;
  void get_losses(float* losses) const override;
  void get_residual_gradient(float* dresidual) const override;

  void zero_grad() override;
  float forward_backward(const int* inputs, const int* targets, float loss_scale) override;
  void queue_forward_backward(const int* inputs, const int* targets, float loss_scale) override;
  StepOutcome finish_step(const AdamWHyper& hyper, int step, float grad_clip,
                          int micro_batches) override;
  float evaluate(const int* inputs, const int* targets) override;
  void start_generation(int batch, int max_len) override;
  void prefill(const int* prompts, int length, float* logits) override;
  void decode_step(const int* next_tokens, float* logits) override;
  int generation_length() const override { return gen_length_; }

  void expect_last_micro_batch() override;
  void synchronize_parameters() override { complete_parameter_gather(); }
  void reduce_gradients() override;
  float grad_norm() override;
  void adamw_step(const AdamWHyper& hyper, int step, float grad_scale) override;

  void get_optimizer_state(float* m, float* v) const override;
  void set_optimizer_state(const float* m, const float* v) override;
  std::vector<uint8_t> precision_state() const override;
  std::vector<std::pair<std::string, int64_t>> fp8_saturated_tensors() const override {
    return fp8_ ? fp8_->saturated_tensors() : std::vector<std::pair<std::string, int64_t>>{};
  }
  bool set_precision_state(const std::vector<uint8_t>& bytes) override;

  std::optional<CommunicationTime> last_step_communication() const override;
  const MemoryPlan& memory_plan() const override { return plan_; }
  size_t peak_memory_bytes() const override { return peak_used_bytes_; }

 private:
  template <typename U>
  U* buf(GpuBuffer id) const {
    return static_cast<U*>(buffers_[id]);
  }
  T_* act(GpuBuffer id) const { return buf<T_>(id); }
  /// The attention of the current (B, T) and the tensors of layer l (saved per layer).
  gpu::AttentionConfig attention_at(int B, int T) const;
  gpu::AttentionTensors attention_tensors(const gpu::AttentionConfig& config, int l) const;
  /// wte, wpe, lnfw, lnfb among the parameters and the gradients (LayerMajorLayout's order).
  T_* param(int tensor) const { return buf<T_>(kParams) + device_layout_.offset(tensor); }
  T_* grad(int tensor) const { return buf<T_>(kGrads) + device_layout_.offset(tensor); }
  /// Layer l's parameters and their gradients.
  LayerTensors<T_> layer_params(int l) const {
    return layer_tensors(buf<T_>(kParams), device_layout_, l);
  }
  LayerTensors<T_> layer_grads(int l) const {
    return layer_tensors(buf<T_>(kGrads), device_layout_, l);
  }

  void allocate_all(const std::vector<GpuBufferSpec>& specs);
  /// Throws gpt2::Error for a training call on an inference-only model.
  void check_training(const char* call) const;
  void upload_tokens(const int* inputs, const int* targets, int B, int T);
  /// Encoder, layers and the final layernorm (lnf); the classifier is one of the three below.
  void forward(int B, int T);
  /// The encoder, layer 0's ln1, the L blocks (each ending with its residual add fused with
  /// the next ln1, the last one's with lnf) over the uploaded (B,T) tokens, attention by the
  /// model's kernel; every layer's activations kept (backward and prefill read them).
  /// shared: the rows are this rank's of the context group's sequences (context_): wpe at
  /// their positions, attention over the group; else whole sequences from position 0.
  void forward_blocks(int B, int T, bool shared);
  /// The count a micro-batch's mean loss divides by: B*T, or the whole sequences' B * seq_len
  /// for a context-parallel rank (its share of the mean).
  int64_t loss_count(int B, int T) const {
    return static_cast<int64_t>(B) * (context_ ? options_.seq_len : T);
  }
  /// Layer l's slices of the per-layer buffers in a forward over BT = B*T rows.
  BlockActivations<T_> block_activations(int l, size_t BT) const;
  /// Block l over (B,T) rows whose ln1 (a.ln1, a.ln1_mean, a.ln1_rstd) is already computed:
  /// qkv, attend() (which fills a.atty from a.qkv), attproj, residual + ln2 (one pass), fc +
  /// gelu, fcproj, then the residual add fused with `next` (the following LayerNorm).
  template <typename Attend>
  void block_forward(int l, const BlockActivations<T_>& a, int B, int T, Attend&& attend,
                     const FollowingLayerNorm<T_>& next);
  /// One block linear (Fp8Linears::Linear), out (B,T,OC) = in (B,T,IC) W^T + b, and with
  /// pre_gelu the fc layer's GELU (out = gelu, pre_gelu = the GEMM's values): FP8 GEMMs in a
  /// training pass of an fp8 model (fp8_pass_), else the model's own precision.
  void linear_forward(int l, int linear, T_* out, const T_* in, const T_* weight, const T_* bias,
                      T_* pre_gelu, int B, int T, int IC, int OC);
  /// Its backward: dinp = dout W (with pre_gelu: times gelu'(pre_gelu); an FP8 pass applies
  /// that gelu' in fc's backward instead), dweight += dout^T in, dbias += column sums of dout.
  void linear_backward(int l, int linear, T_* dinp, T_* dweight, T_* dbias, const T_* dout,
                       const T_* in, const T_* weight, const T_* pre_gelu, int B, int T, int IC,
                       int OC);
  /// FP8: the weights' codes cast again if the parameters changed since (before a training
  /// pass; outside any graph capture).
  void refresh_fp8_weights();
  /// FP8, after an optimizer update: the delayed scales from the step's amaxes (with
  /// `saturated`, the count of tensors whose casts saturated added to it), and the weights'
  /// codes marked stale.
  void update_fp8_scales(uint32_t* saturated = nullptr);
  /// Layer l's LayerNorm over (B,T) rows of a before `linear` (Fp8Linears::kQkv: ln1, as
  /// `next` of block l-1 or the encoder's for l = 0; kFc: ln2), writing FP8 codes where
  /// fp8_layernorm says so.
  FollowingLayerNorm<T_> layernorm_before(int l, int linear, const BlockActivations<T_>& a) const;
  FollowingLayerNorm<T_> ln1_of(int l, const BlockActivations<T_>& a) const {
    return layernorm_before(l, Fp8Linears::kQkv, a);
  }
  /// Whether the LayerNorm before `linear` (Fp8Linears::kQkv: ln1, kFc: ln2) writes its FP8
  /// codes itself in this pass: an fp8 training pass, a width layernorm_fp8 takes, and for ln2
  /// no --recompute fc (whose second fc forward reads the bf16 ln2).
  bool fp8_layernorm(int linear) const;
  /// ln over (B,T) rows: of residual + addend (each sum stored to residual_out, rounded once)
  /// when addend is set, else of residual; to ln.out or, with ln.codes, to FP8 codes.
  void run_layernorm(const FollowingLayerNorm<T_>& ln, T_* residual_out, const T_* residual,
                     const T_* addend, int B, int T);
  /// Evaluation: the losses (B,T) of the forward's lnf, chunk by chunk (classifier_chunk_rows_).
  void classifier_losses(int B, int T);
  /// Training: per chunk the losses, then dlnf (=) and dwte (+=) through the fused
  /// cross-entropy, dlogits = (softmax - onehot) * loss_scale / (B*T).
  void classifier_forward_backward(float loss_scale);
  /// Generation's caches of layer l: (gen_B_, NH, gen_max_len_, HS) each.
  T_* key_cache(int l) const;
  T_* value_cache(int l) const;
  /// lnf and the classifier on gen_B_ contiguous rows (gen_B_, C) of the last block's output,
  /// (gen_B_, Vp) at the start of kLogits (which holds >= batch_size rows); logits (gen_B_, V)
  /// to the host. Synchronizes.
  void generation_logits(const T_* rows, float* logits);
  void backward(float loss_scale);
  /// Forward, backward and the mean loss into the training scalars: as a CUDA graph once
  /// captured (use_graphs_), else launch by launch.
  void enqueue_forward_backward(float loss_scale);
  /// The enqueue that enqueue_forward_backward runs or captures: data parallel, the pending
  /// parameter gather first (gather) and the reductions' end last (armed); then forward,
  /// backward and the mean loss.
  void launch_forward_backward(float loss_scale, bool gather, bool armed);
  /// Data parallel: the compute stream waits for any parameter gather still under way, so
  /// that what follows reads whole parameters (evaluation, generation, reading them back).
  void complete_parameter_gather() const {
    if (dp_ && dp_->sharded()) dp_->complete_parameter_gather();
  }
  /// Throws gpt2::Error when parameters wait for their gather (Model::synchronize_parameters).
  void check_parameters_whole(const char* call) const;
  gpu::StepScalars* step_scalars(StepScalarsSlot slot) const {
    return buf<gpu::StepScalars>(kStepScalars) + slot;
  }
  /// The scalars of `slot`, brought to the host (synchronizes).
  gpu::StepScalars read_step_scalars(StepScalarsSlot slot) const;
  void sample_memory();
  /// Data parallel: throws unless reduce_gradients ran since the step's gradients began.
  void check_reduced(const char* call) const;
  /// use(grads, count) with the gradients an update reads: data parallel, the reduced ones
  /// (bf16 or fp32; ZeRO-1, this rank's shard), else the gradient buffer.
  template <typename Use>
  void with_update_gradients(Use&& use) const;
  /// Data parallel: this rank's fp32 state (master weights, m or v) from the whole host copy.
  void upload_local(GpuBuffer id, const float* full);
  /// The fp32 weights: the parameters themselves (fp32), else the master copy.
  GpuBuffer master_buffer() const { return std::is_same_v<T_, float> ? kParams : kMaster; }

  ModelOptions options_;
  ModelConfig config_;
  // The device buffers hold the parameters, their gradients and the optimizer state in
  // layer-major order (parameters.h); every host interface converts to and from llm.c's.
  LayerMajorLayout device_layout_;
  MemoryPlan plan_;
  gpu::AttentionConfig attention_;  // at (batch_size, seq_len); the kernel chosen once
  int classifier_chunk_rows_ = 0;   // rows of the kLogits buffer
  std::unique_ptr<gpu::Context> ctx_;
  std::vector<void*> buffers_;          // indexed by GpuBuffer; nullptr for empty items
  // Token uploads go through page-locked staging (2 * B*T ints: inputs, targets), reused once
  // the previous upload's copy has run (tokens_copied_).
  int* pinned_tokens_ = nullptr;
  cudaEvent_t tokens_copied_ = nullptr;
  gpu::StepScalars* pinned_scalars_ = nullptr;  // read_step_scalars' landing place
  // The training forward + backward as CUDA graphs (options_.cuda_graphs), one per kind of
  // micro-batch: its loss scale and, data parallel, whether it gathers the parameters first
  // and ends the reductions. The first call of a kind runs eagerly (lazy module loading,
  // cuBLASLt's algorithm choices, NCCL's connections), the second captures.
  struct StepGraph {
    float loss_scale = 0.0f;
    bool gather = false;
    bool armed = false;
    bool ran_eagerly = false;
    cudaGraphExec_t exec = nullptr;
    std::vector<TimedSpan> spans;  // data parallel: its timing events
  };
  bool use_graphs_ = false;
  std::vector<StepGraph> graphs_;
  int cur_B_ = 0, cur_T_ = 0;
  bool have_targets_ = false;
  size_t peak_used_bytes_ = 0;
  // Generation session: gen_B_ sequences of gen_length_ tokens so far, their keys and values
  // in the caches (key_cache / value_cache), room for gen_max_len_.
  int gen_B_ = 0, gen_max_len_ = 0, gen_length_ = -1;
  // Data parallel over a device communicator (nullptr: the plain single-GPU path).
  std::unique_ptr<CudaDataParallel<T_>> dp_;
  // Context parallel: attention over the group's sequences (nullptr: whole sequences here).
  std::unique_ptr<CudaContextAttention<T_>> context_;
  gpu::AdamWSegmentTable adamw_table_;  // this rank's AdamW segments, on the device
  bool grads_reduced_ = false;
  // --precision fp8 (a training bf16 model): the block linears' FP8 state, else nullptr; whether
  // the parameters changed since its weights were cast; whether the pass being enqueued is a
  // training forward + backward (evaluation and generation run in bf16).
  std::unique_ptr<Fp8Linears> fp8_;
  std::unique_ptr<Fp8Classifier> fp8_classifier_;  // --fp8-classifier, else nullptr
  bool fp8_weights_stale_ = true;
  // The last AdamW update recorded the FP8 weights' amaxes (adamw_table_.has_amax), and the
  // parameters have not been set since: the refresh takes them instead of a pass of its own.
  bool fp8_amaxes_recorded_ = false;
  bool fp8_pass_ = false;
};

template <typename T_>
template <typename Attend>
void CudaModel<T_>::block_forward(int l, const BlockActivations<T_>& a, int B, int T,
                                  Attend&& attend, const FollowingLayerNorm<T_>& next) {
  cudaStream_t stream = ctx_->stream();
  const int C = config_.channels;
  const int64_t rows_x_channels = static_cast<int64_t>(B) * T * C;
  const LayerTensors<T_> w = layer_params(l);
  using L8 = Fp8Linears;
  // A LayerNorm that wrote its linear's FP8 codes leaves that linear no input to read.
  const T_* qkv_in = fp8_layernorm(L8::kQkv) ? nullptr : a.ln1;
  linear_forward(l, L8::kQkv, a.qkv, qkv_in, w.qkvw, w.qkvb, nullptr, B, T, C, 3 * C);
  attend();
  linear_forward(l, L8::kAttProj, a.proj, a.atty, w.attprojw, w.attprojb, nullptr, B, T, C, C);
  const FollowingLayerNorm<T_> ln2 = layernorm_before(l, L8::kFc, a);
  run_layernorm(ln2, a.residual2, a.residual, a.proj, B, T);
  const T_* fc_in = ln2.codes.scale != nullptr ? nullptr : a.ln2;
  linear_forward(l, L8::kFc, a.fch_gelu, fc_in, w.fcw, w.fcb, a.fch, B, T, C, 4 * C);
  linear_forward(l, L8::kFcProj, a.proj, a.fch_gelu, w.fcprojw, w.fcprojb, nullptr, B, T, 4 * C,
                 C);
  if (next.out != nullptr || next.codes.scale != nullptr)
    run_layernorm(next, a.residual3, a.residual2, a.proj, B, T);
  else
    gpu::residual_forward(a.residual3, a.residual2, a.proj, rows_x_channels, stream);
}

}  // namespace gpt2::cuda_model_detail
