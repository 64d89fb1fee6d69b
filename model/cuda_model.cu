/**
 * @file cuda_model.cu
 * @brief CudaModel<T_>: GPT-2 forward, backward and AdamW over kernels/gpu (T_ = bf16 | fp32).
 *
 * The layer structure, the residual-gradient discipline and the buffer names are those of
 * CpuGpt2 (model/cpu_model.cpp): one residual-gradient buffer for the whole stream, zeroed once
 * per backward; layernorm_backward adds into it; matmul / attention / gelu overwrite their
 * activation gradients; every parameter gradient accumulates (+=). Differences, all for memory:
 * the attproj / fcproj outputs live in one shared (B,T,C) buffer (only the residual sums are
 * needed later); the classifier never holds the logits of all B*T positions. The forward
 * stops at lnf; the classifier then runs over chunks of R rows of (B*T) in one (R,Vp) buffer
 * which the layers' backward then uses as its workspace (dfch, dln2, datty, dqkv, dln1)
 * (R = classifier_chunk_rows(): what fits in that workspace, 2432 rows at d12 B=16 T=1024 in
 * bf16, against 1.5 GiB for (B,T,Vp)). Training, per chunk: logits =
 * lnf_chunk wte^T; fused cross-entropy (the chunk's losses, and dlogits = (softmax - onehot) *
 * loss_scale/(B*T) over the logits in place); dlnf_chunk = dlogits wte; dwte += dlogits^T
 * lnf_chunk. Evaluation: logits and losses per chunk. Each row's loss depends on its row only,
 * so the chunking changes nothing but the GEMMs' summation order (cuBLAS may pick another
 * algorithm per row count) and, in bf16, dwte's rounding: one bf16 rounding per chunk's +=
 * (matmul.cuh). The probabilities are never stored. Per-layer activations are (L,B,T,X)
 * buffers whose layer l starts at l*B*T*X for the (B,T) of the current forward, so a shorter
 * forward (sampling) fits inside. With recompute_fc the fc output and its GELU are one layer's
 * (B,T,4C) buffers instead: every layer's forward writes them, and its backward first runs the
 * very same fc GEMM (GELU_AUX epilogue) again, which gives the same bits.
 * The forward's per-layer code is one function (block_forward) over a BlockActivations of
 * pointers, with the attention step passed in; training, prefill and decode all run it. Each
 * residual add is fused with the LayerNorm that reads it (ln2 inside the block; the next
 * block's ln1, or lnf, at its end): the same bits as the add then the LayerNorm.
 * Generation keeps a key/value cache per layer, (gen_B, NH, max_len, HS) in the storage type,
 * in buffers a session may overwrite: the key caches in ln1, the value caches in ln2 (each
 * L*B*T*C elements, the caches' size at max_len = T). Prefill runs the blocks over the prompt,
 * then copies each layer's keys and values from its kept qkv into the caches (after the
 * forward, which writes ln1/ln2), and computes lnf + classifier for the B last positions only.
 * A decode step runs B rows (T = 1) through the same blocks, attention being a cache write and
 * gpu::attention_decode_forward, its ln1/ln2 rows in the lnf buffer; the embedding of position
 * pos is wpe + pos*C. Only the decode attention's split-K partials have a plan item of their own.
 * Every buffer is one cudaMalloc named by its memory-plan item (the plan is built first).
 * Everything runs on the Context's stream; methods that return host values synchronize.
 */
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
#include "kernels/gpu/matmul.cuh"
#include "kernels/gpu/residual.cuh"
#include "kernels/gpu/row_copy.cuh"
#include "kernels/gpu/step_scalars.cuh"
#include "model/context_parallel.h"
#include "model/cuda_context_attention.h"
#include "model/cuda_data_parallel.h"
#include "model/parameters.h"

namespace gpt2 {
namespace {

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

bool uses_device_collectives(const ModelOptions& options) {
  return options.training && options.comm != nullptr &&
         options.comm->memory_space() == MemorySpace::kDevice;
}

DataParallelShape data_parallel_shape(const ModelOptions& options) {
  const size_t num_params = ParameterLayout::for_config(options.config).total;
  DataParallelShape shape;
  shape.padded = shape.local = num_params;
  if (!uses_device_collectives(options)) return shape;
  shape.active = true;
  shape.sharded = options.zero_stage == 1;
  shape.reduce_bf16 = options.grad_reduce == GradReduce::kBf16;
  shape.plan = gradient_bucket_plan(options.config, DeviceKind::kCuda, options.bucket_elements,
                                    options.comm->world_size(), options.comm->rank());
  shape.padded = shape.plan.padded_elements();
  if (shape.sharded) shape.local = shape.plan.local_elements();
  return shape;
}

/// What one AdamW launch updates: this rank's segments of the parameters (every slice of the
/// layout whole without data parallel or with ZeRO-0), each with its tensor's weight decay.
std::vector<gpu::AdamWSegment> adamw_segments(const DataParallelShape& dp,
                                              const LayerMajorLayout& layout) {
  std::vector<gpu::AdamWSegment> segments;
  for (const UpdateSegment& segment : update_segments(dp.plan, layout.slices(), dp.sharded)) {
    gpu::AdamWSegment adamw;
    adamw.param_offset = static_cast<int64_t>(segment.flat);
    adamw.state_offset = static_cast<int64_t>(segment.local);
    adamw.count = static_cast<int64_t>(segment.count);
    adamw.decays = ParameterLayout::decays(segment.tensor);
    segments.push_back(adamw);
  }
  return segments;
}

}  // namespace

size_t layer_gradient_workspace_bytes(const ModelOptions& options) {
  if (!options.training) return 0;
  const size_t x = options.precision == Precision::kBf16 ? 2 : 4;
  return static_cast<size_t>(options.batch_size) * options.local_seq_len() * 10 *
         options.config.channels * x;
}

int classifier_chunk_rows(const ModelOptions& options) {
  const int64_t BT = static_cast<int64_t>(options.batch_size) * options.local_seq_len();
  int64_t rows = options.classifier_chunk_rows;
  if (rows <= 0) {
    // The largest power of two of rows within the budget (GEMM-friendly, and it divides the
    // usual power-of-two B*T into equal chunks), or, when more, as many rows (a multiple of
    // 128) as fit in the layers' backward workspace the chunk shares its buffer with: fewer
    // chunks, each a larger GEMM, for no extra memory.
    const size_t row_bytes = static_cast<size_t>(options.config.padded_vocab_size) *
                             (options.precision == Precision::kBf16 ? 2 : 4);
    rows = 1;
    while (static_cast<size_t>(rows) * 2 * row_bytes <= kClassifierChunkBytes) rows *= 2;
    const int64_t shared_rows =
        static_cast<int64_t>(layer_gradient_workspace_bytes(options) / row_bytes) / 128 * 128;
    rows = std::max(rows, shared_rows);
  }
  // At least B rows: generation puts the B last-position logits at the buffer's start.
  return static_cast<int>(std::clamp<int64_t>(rows, options.batch_size, BT));
}

namespace {

/// The attention of a model at its full (B, T) (context parallel: this rank's rows; whole:
/// the sequences'); the kernel is chosen here, once.
gpu::AttentionConfig attention_config(const ModelOptions& options, bool whole = false) {
  gpu::AttentionConfig config;
  config.B = options.batch_size;
  config.T = whole ? options.seq_len : options.local_seq_len();
  config.C = options.config.channels;
  config.NH = options.config.num_heads;
  config.bf16 = options.precision == Precision::kBf16;
  config.kernel = gpu::select_attention_kernel(options.attention, options.flash_kernel,
                                               config.bf16, options.config.head_size());
  config.deterministic = options.deterministic_attention;
  return config;
}

std::vector<GpuBufferSpec> gpu_buffer_specs(const ModelOptions& options) {
  const ModelConfig& cfg = options.config;
  const size_t B = options.batch_size, T = options.local_seq_len(), C = cfg.channels;
  const size_t L = cfg.num_layers, Vp = cfg.padded_vocab_size;
  const size_t BT = B * T;
  const bool bf16_storage = options.precision == Precision::kBf16;
  const size_t x = bf16_storage ? 2 : 4;  // bytes of one stored value
  const size_t f = 4;
  const gpu::AttentionConfig attention = attention_config(options);
  const size_t num_params = ParameterLayout::for_config(cfg).total;
  const int Bi = options.batch_size, Ti = static_cast<int>(T), Ci = cfg.channels;
  const size_t max_oc = std::max<size_t>(4 * C, 3 * C);
  const size_t matmul_scratch =
      static_cast<size_t>(gpu::matmul_backward_scratch_floats(Bi, Ti, static_cast<int>(max_oc)));
  const DataParallelShape dp = data_parallel_shape(options);
  const std::string shard =
      dp.sharded ? str_cat(", ZeRO-1 shard: ", dp.local, " of ", num_params) : std::string();

  std::vector<GpuBufferSpec> s(kNumGpuBuffers);
  auto set = [&s](GpuBuffer id, const char* group, std::string name, size_t bytes) {
    s[id] = {group, std::move(name), bytes};
  };
  const char* dtype = bf16_storage ? "bf16" : "fp32";
  set(kParams, "parameters", str_cat("parameters (", dtype, ")"), dp.padded * x);
  set(kMaster, "parameters", str_cat("master parameters (fp32", shard, ")"),
      bf16_storage ? dp.local * f : 0);
  set(kGrads, "gradients", str_cat("gradients (", dtype, ")"), dp.padded * x);
  set(kAdamM, "optimizer", str_cat("AdamW m (fp32", shard, ")"), dp.local * f);
  set(kAdamV, "optimizer", str_cat("AdamW v (fp32", shard, ")"), dp.local * f);
  set(kAdamWSegments, "optimizer", "AdamW segment table",
      gpu::adamw_segment_table_bytes(adamw_segments(dp, LayerMajorLayout(cfg)).size()));
  // Data parallel: the gradients summed over the ranks (ZeRO-0 sums the gradient buffer in place
  // when it already holds the sum's type), for ZeRO-1 the one bucket a widening or a gather to
  // the host passes through, and every rank's loss and norm.
  const size_t reduced = !dp.active                       ? 0
                         : dp.sharded                     ? dp.local
                         : bf16_storage && !dp.reduce_bf16 ? dp.padded
                                                          : 0;
  set(kReducedGrads, "gradients",
      str_cat("reduced gradients (", dp.reduce_bf16 ? "bf16" : "fp32", shard, ")"),
      reduced * (dp.reduce_bf16 ? 2 : f));
  set(kReduceStaging, "workspace", "data-parallel staging bucket (fp32)",
      dp.sharded ? dp.plan.max_bucket_size() * f : 0);
  set(kRankScalars, "workspace", "every rank's loss and norm fp64",
      dp.active ? 2 * static_cast<size_t>(options.world_size()) * sizeof(double) : 0);
  set(kEncoded, "activations", "encoded (B,T,C)", BT * C * x);
  set(kLn1, "activations", "ln1 (L,B,T,C)", L * BT * C * x);
  set(kLn1Mean, "activations", "ln1 mean (L,B,T) fp32", L * BT * f);
  set(kLn1Rstd, "activations", "ln1 rstd (L,B,T) fp32", L * BT * f);
  set(kQkv, "activations", "qkv (L,B,T,3C)", L * BT * 3 * C * x);
  set(kLn2, "activations", "ln2 (L,B,T,C)", L * BT * C * x);
  set(kLn2Mean, "activations", "ln2 mean (L,B,T) fp32", L * BT * f);
  set(kLn2Rstd, "activations", "ln2 rstd (L,B,T) fp32", L * BT * f);
  // --recompute fc: one layer's, recomputed by the fc GEMM in backward (the same bits).
  const size_t fc_layers = options.recompute_fc ? 1 : L;
  const char* fc_shape = options.recompute_fc ? "(B,T,4C), one layer: recomputed in backward"
                                              : "(L,B,T,4C)";
  set(kFch, "activations", str_cat("fch ", fc_shape), fc_layers * BT * 4 * C * x);
  set(kFchGelu, "activations", str_cat("fch_gelu ", fc_shape), fc_layers * BT * 4 * C * x);
  set(kResidual2, "activations", "residual2 (L,B,T,C)", L * BT * C * x);
  set(kResidual3, "activations", "residual3 (L,B,T,C)", L * BT * C * x);
  set(kLnf, "activations", "lnf (B,T,C)", BT * C * x);
  set(kLnfMean, "activations", "lnf mean (B,T) fp32", BT * f);
  set(kLnfRstd, "activations", "lnf rstd (B,T) fp32", BT * f);
  const size_t chunk_rows = static_cast<size_t>(classifier_chunk_rows(options));
  // One buffer, two uses in turn: the classifier's chunk first, then the layers' gradients.
  set(kLogits, "workspace",
      str_cat("classifier logits, then dlogits in place (R,Vp), R = ", chunk_rows,
              " of B*T = ", BT, " rows", options.training ? "; then the layers' backward "
              "workspace dfch, dln2, datty, dqkv, dln1 (B,T,10C)" : ""),
      std::max(chunk_rows * Vp * x, layer_gradient_workspace_bytes(options)));
  set(kLosses, "activations", "losses (B,T) fp32", BT * f);
  set(kAtty, "attention", "attention output (L,B,T,C)", L * BT * C * x);
  set(kAttSaved, "attention", gpu::attention_saved_name(attention),
      L * gpu::attention_saved_bytes(attention));
  // Context parallel: the kernels run over the whole sequences (model/cuda_context_attention.h).
  const bool context = options.context_size() > 1;
  const gpu::AttentionConfig kernel_shape = context ? attention_config(options, true) : attention;
  set(kAttWorkspace, "attention", gpu::attention_workspace_name(kernel_shape),
      gpu::attention_workspace_bytes(kernel_shape));
  if (context) {
    const ContextShard shard = context_shard(options.seq_len, options.context_size(),
                                             options.context_comm->rank());
    const std::vector<ContextBufferSpec> specs =
        context_attention_buffer_specs(shard, Bi, Ci, cfg.num_heads, x);
    for (int i = 0; i < kNumContextBuffers; ++i)
      set(static_cast<GpuBuffer>(kContextQkv + i), specs[i].group, specs[i].name,
          specs[i].bytes);
    set(kWpeRows, "activations", "wpe at this rank's positions (T_loc,C)", T * C * x);
    set(kDWpeRows, "workspace", "its gradient (T_loc,C)", options.training ? T * C * x : 0);
  }
  // Generation's key/value caches live in ln1 and ln2 (see start_generation); only the split-K
  // partials of decode attention need room of their own: (B,NH,ceil(T/128),HS+2) fp32, about
  // 1/64 of one (B,T,C) activation.
  set(kDecodePartials, "attention", "decode attention split partials fp32",
      static_cast<size_t>(gpu::attention_decode_scratch_floats(Bi, Ci, cfg.num_heads, Ti)) * f);
  set(kProj, "workspace", "attproj / fcproj output (B,T,C)", BT * C * x);
  set(kDLnf, "workspace", "dlnf (B,T,C)", BT * C * x);
  set(kDResidual, "workspace", "dresidual (B,T,C)", BT * C * x);
  set(kMatmulScratch, "workspace", "matmul bias-gradient partial sums fp32", matmul_scratch * f);
  set(kLayernormScratch, "workspace", "layernorm parameter-gradient partial sums fp32",
      static_cast<size_t>(gpu::layernorm_backward_scratch_floats(Bi, Ti, Ci)) * f);
  set(kEncoderScratch, "workspace", "encoder-gradient radix sort int32 + CUB temp",
      gpu::encoder_backward_scratch_bytes(Bi, Ti, cfg.padded_vocab_size));
  set(kNormPartials, "workspace", "gradient-norm partial sums fp32",
      static_cast<size_t>(gpu::global_norm_num_blocks(static_cast<int64_t>(num_params))) * f);
  set(kNormResult, "workspace", "gradient-norm result fp64", sizeof(double));
  set(kStepScalars, "workspace", "step scalars: loss sum, norm, clip (training, evaluation)",
      kNumStepScalars * sizeof(gpu::StepScalars));
  set(kInputs, "workspace", "inputs (B,T) int32", BT * sizeof(int));
  set(kTargets, "workspace", "targets (B,T) int32", BT * sizeof(int));
  if (!options.training) {
    // Inference only: nothing a backward or an optimizer step would use. (The bf16 master
    // copy stays: set_parameters stages the fp32 parameters in it.)
    for (GpuBuffer id : {kGrads, kAdamM, kAdamV, kAdamWSegments, kDLnf, kDResidual,
                         kMatmulScratch, kLayernormScratch, kEncoderScratch, kNormPartials,
                         kNormResult})
      s[id].bytes = 0;
  }
  return s;
}

void validate_cuda_options(const ModelOptions& options) {
  const ModelConfig& config = options.config;
  validate_config(config);
  if (options.batch_size < 1)
    GPT2_USAGE_FAIL("batch size must be >= 1 (got ", options.batch_size, ")");
  if (options.seq_len < 1 || options.seq_len > config.max_seq_len)
    GPT2_USAGE_FAIL("sequence length must be in [1, maxT=", config.max_seq_len, "] (got ",
                    options.seq_len, ")");
  (void)attention_config(options);  // the attention kernel can run this model
  if (options.classifier_chunk_rows < 0)
    GPT2_USAGE_FAIL("classifier chunk rows must be >= 0 (0: automatic; got ",
                    options.classifier_chunk_rows, ")");
  if (options.zero_stage != 0 && options.zero_stage != 1)
    GPT2_USAGE_FAIL("ZeRO stage must be 0 or 1 (got ", options.zero_stage, ")");
  if (options.training && options.world_size() > 1 && !uses_device_collectives(options))
    GPT2_FAIL("the CUDA model needs a device communicator (NCCL) to train with ",
              options.world_size(), " ranks, not ", options.comm->backend());
  if (options.grad_reduce == GradReduce::kBf16 && options.precision != Precision::kBf16)
    GPT2_USAGE_FAIL("bf16 gradient sums (--grad-reduce bf16) need bf16 gradients (--precision "
                    "bf16); an fp32 run reduces in fp32");
  if (config.channels % 8 != 0)
    GPT2_USAGE_FAIL("the CUDA backend needs the channel count to be a multiple of 8 (got ",
                    config.channels, ")");
  if (static_cast<int64_t>(options.batch_size) * config.num_heads > 65535)
    GPT2_USAGE_FAIL("B*NH = ", static_cast<int64_t>(options.batch_size) * config.num_heads,
                    " exceeds the CUDA grid limit of 65535");
  const int context = options.context_size();
  if (context > 1) {
    if (options.attention != AttentionKind::kFlash)
      GPT2_USAGE_FAIL("context parallelism needs --attn flash: naive attention exists to "
                      "materialize each sequence's whole T x T scores, which no rank holds");
    if (options.seq_len < 2 * context * kContextChunkGranule)
      GPT2_USAGE_FAIL("--context-parallel ", context, " on the GPU needs --seq-len >= ",
                      2 * context * kContextChunkGranule, " (2N chunks of ",
                      kContextChunkGranule, " positions, the attention kernels' tiles; got ",
                      options.seq_len, ")");
    if (options.context_comm->memory_space() != MemorySpace::kDevice)
      GPT2_FAIL("the CUDA model's context group needs a device communicator (NCCL), not ",
                options.context_comm->backend());
  }
}

// ---------------------------------------------------------------------------------------------
// Small kernels of the model itself

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

float host_float(float x) { return x; }
float host_float(bf16 x) {
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

/// The LayerNorm that follows a block's output (the next block's ln1, or lnf after the last),
/// fused with the block's final residual add; out == nullptr: none (the add alone).
template <typename T_>
struct FollowingLayerNorm {
  T_* out = nullptr;
  float* mean = nullptr;
  float* rstd = nullptr;
  const T_* weight = nullptr;
  const T_* bias = nullptr;
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
  /// Layer l's ln1 over (B,T) rows of a, as `next` of block l-1 (the encoder's for l = 0).
  FollowingLayerNorm<T_> ln1_of(int l, const BlockActivations<T_>& a) const;
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
};

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
  GPT2_CHECK((options.precision == Precision::kBf16) == kIsBf16);
  ctx_ = std::make_unique<gpu::Context>();
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
  if (options.training)
    adamw_table_ = gpu::upload_adamw_segments(buffers_[kAdamWSegments],
                                              adamw_segments(shape, device_layout_),
                                              ctx_->stream());
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
  for (GpuBuffer id : {kGrads, kAdamM, kAdamV})
    if (buffers_[id] != nullptr)  // absent in an inference-only model
      GPT2_CUDA_CHECK(cudaMemsetAsync(buffers_[id], 0, plan_.items[id].bytes, ctx_->stream()));
  ctx_->synchronize();
  sample_memory();
}

template <typename T_>
gpu::AttentionConfig CudaModel<T_>::attention_at(int B, int T) const {
  gpu::AttentionConfig config = attention_;
  config.B = B;
  config.T = T;
  return config;
}

template <typename T_>
gpu::AttentionTensors CudaModel<T_>::attention_tensors(const gpu::AttentionConfig& config,
                                                       int l) const {
  const size_t BT = static_cast<size_t>(config.B) * config.T;
  gpu::AttentionTensors tensors;
  tensors.qkv = act(kQkv) + l * BT * 3 * config.C;
  tensors.out = act(kAtty) + l * BT * config.C;
  tensors.saved = static_cast<char*>(buffers_[kAttSaved]) + l * gpu::attention_saved_bytes(config);
  tensors.workspace = buffers_[kAttWorkspace];
  return tensors;
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
void CudaModel<T_>::zero_grad() {
  if (buffers_[kGrads] == nullptr) return;  // inference only: no gradients to zero
  GPT2_CUDA_CHECK(cudaMemsetAsync(buffers_[kGrads], 0, plan_.items[kGrads].bytes, ctx_->stream()));
  GPT2_CUDA_CHECK(cudaMemsetAsync(step_scalars(kTrainingScalars), 0, sizeof(gpu::StepScalars),
                                  ctx_->stream()));
  if (dp_) dp_->begin_step();
  grads_reduced_ = false;
}

template <typename T_>
void CudaModel<T_>::expect_last_micro_batch() {
  check_training("expect_last_micro_batch");
  if (dp_) dp_->arm();  // a no-op without overlap
}

template <typename T_>
void CudaModel<T_>::check_parameters_whole(const char* call) const {
  if (dp_ && dp_->gather_pending())
    GPT2_FAIL(call, " after a ZeRO-1 update whose parameters are gathered during the next "
              "training forward: call synchronize_parameters() on every rank first");
}

template <typename T_>
void CudaModel<T_>::check_reduced(const char* call) const {
  if (dp_ && !grads_reduced_)
    GPT2_FAIL(call, " before reduce_gradients(): the data-parallel gradients are summed over the "
              "ranks first");
}

template <typename T_>
void CudaModel<T_>::reduce_gradients() {
  check_training("reduce_gradients");
  // The last micro-batch ended the reductions when armed; otherwise they all start here.
  if (dp_ && !dp_->reduction_finished()) dp_->finish_reduction();
  grads_reduced_ = true;
}

template <typename T_>
std::optional<Model::CommunicationTime> CudaModel<T_>::last_step_communication() const {
  if (!dp_) return std::nullopt;
  ctx_->synchronize();
  const DataParallelTiming timing = dp_->step_timing();
  return CommunicationTime{timing.collective_ms, timing.exposed_ms};
}

template <typename T_>
void CudaModel<T_>::upload_tokens(const int* inputs, const int* targets, int B, int T) {
  const size_t n = static_cast<size_t>(B) * T;
  const int V = config_.vocab_size;
  // An out-of-range id would index outside wte on the device: refuse it here, with its place.
  for (size_t i = 0; i < n; ++i) {
    GPT2_CHECK(inputs[i] >= 0 && inputs[i] < V, "input token ", inputs[i], " at ", i, ", V=", V);
    GPT2_CHECK(!targets || (targets[i] >= 0 && targets[i] < V), "target token ", targets[i],
               " at ", i, ", V=", V);
  }
  // The staging is free once the previous upload's copy ran (at the start of its forward).
  GPT2_CUDA_CHECK(cudaEventSynchronize(tokens_copied_));
  int* staged_inputs = pinned_tokens_;
  int* staged_targets = pinned_tokens_ + n;
  std::copy(inputs, inputs + n, staged_inputs);
  GPT2_CUDA_CHECK(cudaMemcpyAsync(buffers_[kInputs], staged_inputs, n * sizeof(int),
                                  cudaMemcpyHostToDevice, ctx_->stream()));
  if (targets) {
    std::copy(targets, targets + n, staged_targets);
    GPT2_CUDA_CHECK(cudaMemcpyAsync(buffers_[kTargets], staged_targets, n * sizeof(int),
                                    cudaMemcpyHostToDevice, ctx_->stream()));
  }
  GPT2_CUDA_CHECK(cudaEventRecord(tokens_copied_, ctx_->stream()));
  cur_B_ = B;
  cur_T_ = T;
  have_targets_ = targets != nullptr;
}

template <typename T_>
void CudaModel<T_>::forward(int B, int T) {
  forward_blocks(B, T, context_ != nullptr);  // ends with lnf, fused with the last residual add
}

template <typename T_>
void CudaModel<T_>::classifier_losses(int B, int T) {
  const int64_t BT = static_cast<int64_t>(B) * T;
  const int C = config_.channels, V = config_.vocab_size, Vp = config_.padded_vocab_size;
  T_* logits = act(kLogits);  // (rows, Vp)
  for (int64_t first = 0; first < BT; first += classifier_chunk_rows_) {
    const int rows = static_cast<int>(std::min<int64_t>(classifier_chunk_rows_, BT - first));
    // A chunk is (B, T) = (1, rows) to the ops.
    gpu::matmul_forward(logits, act(kLnf) + first * C, param(kWte),
                        static_cast<const T_*>(nullptr), 1, rows, C, Vp, *ctx_);
    gpu::crossentropy_forward(buf<float>(kLosses) + first, logits, buf<int>(kTargets) + first, 1,
                              rows, V, Vp, ctx_->stream());
  }
}

template <typename T_>
void CudaModel<T_>::classifier_forward_backward(float loss_scale) {
  const int64_t BT = static_cast<int64_t>(cur_B_) * cur_T_;
  const int C = config_.channels, V = config_.vocab_size, Vp = config_.padded_vocab_size;
  const float dloss =
      static_cast<float>(static_cast<double>(loss_scale) / double(loss_count(cur_B_, cur_T_)));
  T_* logits = act(kLogits);  // (rows, Vp): the logits, then their gradient in place
  for (int64_t first = 0; first < BT; first += classifier_chunk_rows_) {
    const int rows = static_cast<int>(std::min<int64_t>(classifier_chunk_rows_, BT - first));
    const T_* lnf = act(kLnf) + first * C;
    gpu::matmul_forward(logits, lnf, param(kWte), static_cast<const T_*>(nullptr), 1, rows, C, Vp,
                        *ctx_);
    gpu::crossentropy_forward_backward(buf<float>(kLosses) + first, logits,
                                       buf<int>(kTargets) + first, dloss, 1, rows, V, Vp,
                                       ctx_->stream());
    // dlnf rows [first, first + rows) (=) and dwte (+=, accumulating over the chunks); no bias.
    gpu::matmul_backward(act(kDLnf) + first * C, grad(kWte), static_cast<T_*>(nullptr), logits,
                         lnf, param(kWte), 1, rows, C, Vp, static_cast<float*>(nullptr), *ctx_);
  }
}

template <typename T_>
void CudaModel<T_>::forward_blocks(int B, int T, bool shared) {
  const gpu::Context& ctx = *ctx_;
  const size_t BT = static_cast<size_t>(B) * T;
  const gpu::AttentionConfig attention = attention_at(B, T);
  const int L = config_.num_layers;
  // Data parallel, with a parameter gather under way: each point waits for its own buckets
  // (model/cuda_data_parallel.h's need points); otherwise nothing waits.
  const auto wait_parameters = [&](int point) {
    if (dp_) dp_->wait_parameters(point);
  };
  wait_parameters(0);
  const T_* wpe = param(kWpe);
  if (shared) {  // wpe's rows at this rank's positions
    const int64_t C = config_.channels;
    gpu::copy_rows(act(kWpeRows), wpe,
                   RowCopy{1, T, C, {T, C, 0, nullptr}, {config_.max_seq_len, C, 0,
                                                         context_->positions()}},
                   ctx.stream());
    wpe = act(kWpeRows);
  }
  gpu::encoder_forward(act(kEncoded), buf<int>(kInputs), param(kWte), wpe, B, T,
                       config_.channels, ctx.stream());
  const FollowingLayerNorm<T_> first = ln1_of(0, block_activations(0, BT));
  gpu::layernorm_forward(first.out, first.mean, first.rstd, act(kEncoded), first.weight,
                         first.bias, B, T, config_.channels, ctx.stream());
  const FollowingLayerNorm<T_> lnf{act(kLnf), buf<float>(kLnfMean), buf<float>(kLnfRstd),
                             param(kLnfw), param(kLnfb)};
  for (int l = 0; l < L; ++l) {
    wait_parameters(l + 1);
    const FollowingLayerNorm<T_> next =
        l + 1 < L ? ln1_of(l + 1, block_activations(l + 1, BT)) : lnf;
    const BlockActivations<T_> a = block_activations(l, BT);
    block_forward(l, a, B, T, [&] {
      const gpu::AttentionTensors tensors = attention_tensors(attention, l);
      if (shared) {
        context_->forward(a.qkv, a.atty, static_cast<float*>(tensors.saved));
      } else {
        gpu::attention_forward(attention, tensors, ctx);
      }
    }, next);
  }
}

template <typename T_>
FollowingLayerNorm<T_> CudaModel<T_>::ln1_of(int l, const BlockActivations<T_>& a) const {
  const LayerTensors<T_> w = layer_params(l);
  return {a.ln1, a.ln1_mean, a.ln1_rstd, w.ln1w, w.ln1b};
}

template <typename T_>
BlockActivations<T_> CudaModel<T_>::block_activations(int l, size_t BT) const {
  const size_t Cs = config_.channels;
  BlockActivations<T_> a;
  a.residual = l == 0 ? act(kEncoded) : act(kResidual3) + (l - 1) * BT * Cs;
  a.ln1 = act(kLn1) + l * BT * Cs;
  a.ln1_mean = buf<float>(kLn1Mean) + l * BT;
  a.ln1_rstd = buf<float>(kLn1Rstd) + l * BT;
  a.qkv = act(kQkv) + l * BT * 3 * Cs;
  a.atty = act(kAtty) + l * BT * Cs;
  a.residual2 = act(kResidual2) + l * BT * Cs;
  a.ln2 = act(kLn2) + l * BT * Cs;
  a.ln2_mean = buf<float>(kLn2Mean) + l * BT;
  a.ln2_rstd = buf<float>(kLn2Rstd) + l * BT;
  const size_t fc_slot = options_.recompute_fc ? 0 : static_cast<size_t>(l);  // see the plan
  a.fch = act(kFch) + fc_slot * BT * 4 * Cs;
  a.fch_gelu = act(kFchGelu) + fc_slot * BT * 4 * Cs;
  a.residual3 = act(kResidual3) + l * BT * Cs;
  a.proj = act(kProj);
  return a;
}

template <typename T_>
template <typename Attend>
void CudaModel<T_>::block_forward(int l, const BlockActivations<T_>& a, int B, int T,
                                  Attend&& attend, const FollowingLayerNorm<T_>& next) {
  const gpu::Context& ctx = *ctx_;
  cudaStream_t stream = ctx.stream();
  const int C = config_.channels;
  const int64_t rows_x_channels = static_cast<int64_t>(B) * T * C;
  const LayerTensors<T_> w = layer_params(l);
  gpu::matmul_forward(a.qkv, a.ln1, w.qkvw, w.qkvb, B, T, C, 3 * C, ctx);
  attend();
  gpu::matmul_forward(a.proj, a.atty, w.attprojw, w.attprojb, B, T, C, C, ctx);
  gpu::residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, a.residual, a.proj,
                                  w.ln2w, w.ln2b, B, T, C, stream);
  gpu::matmul_forward_gelu(a.fch_gelu, a.fch, a.ln2, w.fcw, w.fcb, B, T, C, 4 * C, ctx);
  gpu::matmul_forward(a.proj, a.fch_gelu, w.fcprojw, w.fcprojb, B, T, 4 * C, C, ctx);
  if (next.out != nullptr)
    gpu::residual_layernorm_forward(a.residual3, next.out, next.mean, next.rstd, a.residual2,
                                    a.proj, next.weight, next.bias, B, T, C, stream);
  else
    gpu::residual_forward(a.residual3, a.residual2, a.proj, rows_x_channels, stream);
}

template <typename T_>
void CudaModel<T_>::backward(float loss_scale) {
  GPT2_CHECK(have_targets_, "backward needs a forward with targets");
  const gpu::Context& ctx = *ctx_;
  cudaStream_t stream = ctx.stream();
  const int B = cur_B_, T = cur_T_;
  const int C = config_.channels, L = config_.num_layers;
  const size_t BT = static_cast<size_t>(B) * T, Cs = C;
  const gpu::AttentionConfig attention = attention_at(B, T);
  float* matmul_scratch = buf<float>(kMatmulScratch);
  float* ln_scratch = buf<float>(kLayernormScratch);

  classifier_forward_backward(loss_scale);  // the losses, dlnf and dwte
  T_* dresidual = act(kDResidual);
  GPT2_CUDA_CHECK(cudaMemsetAsync(dresidual, 0, BT * Cs * sizeof(T_), stream));
  gpu::layernorm_backward(dresidual, grad(kLnfw), grad(kLnfb), act(kDLnf),
                          act(kResidual3) + (L - 1) * BT * Cs, param(kLnfw), buf<float>(kLnfMean),
                          buf<float>(kLnfRstd), B, T, C, ln_scratch, stream);
  if (dp_) dp_->backward_point(0);  // lnf done (model/cuda_data_parallel.h's points)

  // The layers' gradients in the buffer the classifier's chunks used (done with it by now).
  T_* dfch = act(kLogits);      // (B,T,4C)
  T_* dln2 = dfch + BT * 4 * Cs;  // (B,T,C)
  T_* datty = dln2 + BT * Cs;     // (B,T,C)
  T_* dqkv = datty + BT * Cs;     // (B,T,3C)
  T_* dln1 = dqkv + BT * 3 * Cs;  // (B,T,C)
  for (int l = L - 1; l >= 0; --l) {
    const T_* residual = l == 0 ? act(kEncoded) : act(kResidual3) + (l - 1) * BT * Cs;
    const T_* ln1 = act(kLn1) + l * BT * Cs;
    const T_* atty = act(kAtty) + l * BT * Cs;
    const T_* residual2 = act(kResidual2) + l * BT * Cs;
    const T_* ln2 = act(kLn2) + l * BT * Cs;
    const BlockActivations<T_> a = block_activations(l, BT);
    const LayerTensors<T_> w = layer_params(l);
    const LayerTensors<T_> dw = layer_grads(l);
    if (options_.recompute_fc)  // the forward's very GEMM again: the same fch and fch_gelu bits
      gpu::matmul_forward_gelu(a.fch_gelu, a.fch, a.ln2, w.fcw, w.fcb, B, T, C, 4 * C, ctx);
    const T_* fch = a.fch;
    const T_* fch_gelu = a.fch_gelu;

    // dresidual holds d(residual3): the fcproj branch and the skip to residual2 both get it.
    // fcproj's backward with the GELU's folded in: dfch = gelu'(fch) * (dresidual @ W).
    gpu::matmul_backward_gelu(dfch, dw.fcprojw, dw.fcprojb, dresidual, fch_gelu, fch, w.fcprojw,
                              B, T, 4 * C, C, matmul_scratch, ctx);
    gpu::matmul_backward(dln2, dw.fcw, dw.fcb, dfch, ln2, w.fcw, B, T, C, 4 * C, matmul_scratch,
                         ctx);
    gpu::layernorm_backward(dresidual, dw.ln2w, dw.ln2b, dln2, residual2, w.ln2w,
                            buf<float>(kLn2Mean) + l * BT, buf<float>(kLn2Rstd) + l * BT, B, T, C,
                            ln_scratch, stream);
    // Now d(residual2): the attproj branch and the skip to the block input get it.
    gpu::matmul_backward(datty, dw.attprojw, dw.attprojb, dresidual, atty, w.attprojw, B, T, C, C,
                         matmul_scratch, ctx);
    gpu::AttentionTensors tensors = attention_tensors(attention, l);
    if (context_) {
      context_->backward(dqkv, datty, a.qkv, atty, static_cast<const float*>(tensors.saved));
    } else {
      tensors.dout = datty;
      tensors.dqkv = dqkv;
      gpu::attention_backward(attention, tensors, ctx);
    }
    gpu::matmul_backward(dln1, dw.qkvw, dw.qkvb, dqkv, ln1, w.qkvw, B, T, C, 3 * C,
                         matmul_scratch, ctx);
    gpu::layernorm_backward(dresidual, dw.ln1w, dw.ln1b, dln1, residual, w.ln1w,
                            buf<float>(kLn1Mean) + l * BT, buf<float>(kLn1Rstd) + l * BT, B, T, C,
                            ln_scratch, stream);
    if (dp_) dp_->backward_point(L - l);  // layer l done
  }
  if (context_) {
    // wpe's gradient at this rank's rows, then added into its positions' rows.
    GPT2_CUDA_CHECK(cudaMemsetAsync(act(kDWpeRows), 0, static_cast<size_t>(T) * Cs * sizeof(T_),
                                    stream));
    gpu::encoder_backward(grad(kWte), act(kDWpeRows), dresidual, buf<int>(kInputs), B, T, C,
                          config_.padded_vocab_size, buffers_[kEncoderScratch], stream);
    RowCopy add{1, T, C, {config_.max_seq_len, C, 0, context_->positions()}, {T, C, 0, nullptr}};
    add.add = true;
    gpu::copy_rows(grad(kWpe), static_cast<const T_*>(act(kDWpeRows)), add, stream);
  } else {
    gpu::encoder_backward(grad(kWte), grad(kWpe), dresidual, buf<int>(kInputs), B, T, C,
                          config_.padded_vocab_size, buffers_[kEncoderScratch], stream);
  }
  if (dp_) dp_->backward_point(L + 1);  // wte and wpe done
}

template <typename T_>
gpu::StepScalars CudaModel<T_>::read_step_scalars(StepScalarsSlot slot) const {
  GPT2_CUDA_CHECK(cudaMemcpyAsync(pinned_scalars_, step_scalars(slot), sizeof(gpu::StepScalars),
                                  cudaMemcpyDeviceToHost, ctx_->stream()));
  ctx_->synchronize();
  return *pinned_scalars_;
}

template <typename T_>
float CudaModel<T_>::forward_backward(const int* inputs, const int* targets, float loss_scale) {
  queue_forward_backward(inputs, targets, loss_scale);
  const float loss = read_step_scalars(kTrainingScalars).last_mean_loss;  // synchronizes
  sample_memory();
  return loss;
}

template <typename T_>
void CudaModel<T_>::queue_forward_backward(const int* inputs, const int* targets,
                                           float loss_scale) {
  check_training("forward_backward");
  GPT2_CHECK(targets != nullptr);
  if (dp_ && (dp_->launched_any() || grads_reduced_))
    GPT2_FAIL("forward_backward after the step's gradients began their reduction (the last "
              "micro-batch came before it): call zero_grad to start the next step");
  gen_length_ = -1;  // ends a generation session (model.h)
  upload_tokens(inputs, targets, options_.batch_size, attention_.T);  // this rank's rows
  enqueue_forward_backward(loss_scale);
}

template <typename T_>
void CudaModel<T_>::launch_forward_backward(float loss_scale, bool gather, bool armed) {
  const int B = options_.batch_size, T = attention_.T;
  if (gather) dp_->launch_parameter_gather();  // the forward waits for it layer by layer
  forward(B, T);
  backward(loss_scale);
  if (armed) dp_->finish_reduction();  // joins the collectives' stream back (graph capture)
  gpu::mean_loss_accumulate(step_scalars(kTrainingScalars), buf<float>(kLosses),
                            static_cast<int64_t>(B) * T, ctx_->stream(), loss_count(B, T));
}

template <typename T_>
void CudaModel<T_>::enqueue_forward_backward(float loss_scale) {
  cudaStream_t stream = ctx_->stream();
  const bool gather = dp_ && dp_->gather_pending();
  const bool armed = dp_ && dp_->armed();
  if (!use_graphs_) {
    launch_forward_backward(loss_scale, gather, armed);
    return;
  }
  auto found = std::find_if(graphs_.begin(), graphs_.end(), [&](const StepGraph& g) {
    return g.loss_scale == loss_scale && g.gather == gather && g.armed == armed;
  });
  if (found == graphs_.end()) {
    StepGraph fresh;
    fresh.loss_scale = loss_scale;
    fresh.gather = gather;
    fresh.armed = armed;
    graphs_.push_back(fresh);
    found = graphs_.end() - 1;
  }
  StepGraph& step_graph = *found;
  if (!step_graph.ran_eagerly) {
    launch_forward_backward(loss_scale, gather, armed);
    step_graph.ran_eagerly = true;
    return;
  }
  if (step_graph.exec == nullptr) {
    // Every launch (and collective) of the micro-batch is recorded, not run; the buffers,
    // shapes, loss scale and collectives are fixed, so replaying the graph is the same work as
    // the eager calls.
    GPT2_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    if (dp_) dp_->begin_capture();
    cudaGraph_t graph = nullptr;
    std::string failure;
    try {
      launch_forward_backward(loss_scale, gather, armed);
    } catch (const Error& error) {
      failure = error.what();
    }
    if (dp_) step_graph.spans = dp_->end_capture();
    const cudaError_t captured = cudaStreamEndCapture(stream, &graph);
    if (failure.empty() && captured != cudaSuccess) failure = cudaGetErrorString(captured);
    if (failure.empty()) {
      const cudaError_t instantiated = cudaGraphInstantiate(&step_graph.exec, graph, 0);
      if (instantiated != cudaSuccess) failure = cudaGetErrorString(instantiated);
    }
    if (graph != nullptr) GPT2_CUDA_CHECK(cudaGraphDestroy(graph));
    if (!failure.empty()) {
      // Nothing of the capture ran: say why once, and go on launch by launch from the state
      // the capture started in.
      (void)cudaGetLastError();
      step_graph.exec = nullptr;
      use_graphs_ = false;
      std::fprintf(stderr, "warning: CUDA graph capture of the training step failed (%s); the "
                   "step runs launch by launch\n", failure.c_str());
      if (dp_) dp_->restart_micro_batch(gather, armed);
      launch_forward_backward(loss_scale, gather, armed);
      return;
    }
  }
  GPT2_CUDA_CHECK(cudaGraphLaunch(step_graph.exec, stream));
  if (dp_) dp_->replayed(gather, armed, step_graph.spans);
}

template <typename T_>
float CudaModel<T_>::evaluate(const int* inputs, const int* targets) {
  GPT2_CHECK(targets != nullptr);
  check_parameters_whole("evaluate");
  const int B = options_.batch_size, T = attention_.T;  // this rank's rows
  gen_length_ = -1;  // ends a generation session (model.h)
  upload_tokens(inputs, targets, B, T);
  forward(B, T);
  classifier_losses(B, T);
  GPT2_CUDA_CHECK(cudaMemsetAsync(step_scalars(kEvaluationScalars), 0, sizeof(gpu::StepScalars),
                                  ctx_->stream()));
  gpu::mean_loss_accumulate(step_scalars(kEvaluationScalars), buf<float>(kLosses),
                            static_cast<int64_t>(B) * T, ctx_->stream(), loss_count(B, T));
  const float loss = read_step_scalars(kEvaluationScalars).last_mean_loss;
  sample_memory();
  return loss;
}

template <typename T_>
void CudaModel<T_>::start_generation(int batch, int max_len) {
  GPT2_CHECK(batch >= 1 && batch <= options_.batch_size, "generation batch ", batch,
             " with buffers for B=", options_.batch_size);
  GPT2_CHECK(max_len >= 1 && max_len <= attention_.T, "generation max_len ", max_len,
             " with buffers for T=", attention_.T);
  check_parameters_whole("start_generation");
  gen_B_ = batch;
  gen_max_len_ = max_len;
  gen_length_ = 0;
  have_targets_ = false;  // the session overwrites the activations a backward would need
}

// The key cache of layer l fills the ln1 buffer's first L*gen_B_*gen_max_len_*C elements (of
// L*B*T*C) at a pitch of one layer's cache, the value cache the ln2 buffer's. Both are free
// during a session: prefill writes the caches after its forward (which wrote ln1 and ln2) is
// done, and decode steps put their ln1 / ln2 rows in the lnf buffer instead.
template <typename T_>
T_* CudaModel<T_>::key_cache(int l) const {
  return act(kLn1) + static_cast<size_t>(l) * gen_B_ * gen_max_len_ * config_.channels;
}

template <typename T_>
T_* CudaModel<T_>::value_cache(int l) const {
  return act(kLn2) + static_cast<size_t>(l) * gen_B_ * gen_max_len_ * config_.channels;
}

template <typename T_>
void CudaModel<T_>::prefill(const int* prompts, int length, float* logits) {
  GPT2_CHECK(gen_length_ >= 0, "prefill without a generation session (start_generation)");
  GPT2_CHECK(length >= 1 && length <= gen_max_len_, "prefill of ", length,
             " tokens in a session of max_len ", gen_max_len_);
  check_parameters_whole("prefill");
  cudaStream_t stream = ctx_->stream();
  const int B = gen_B_, C = config_.channels, L = config_.num_layers, NH = config_.num_heads;
  const size_t BT = static_cast<size_t>(B) * length, Cs = C;
  upload_tokens(prompts, nullptr, B, length);  // checks the ids first
  gen_length_ = -1;  // no valid session should this throw half way
  forward_blocks(B, length, /*shared=*/false);  // generation stays local, from position 0
  // Every layer's qkv (L,B,length,3C) is still there: its keys and values into the caches.
  for (int l = 0; l < L; ++l)
    gpu::attention_kv_cache_write(key_cache(l), value_cache(l), act(kQkv) + l * BT * 3 * Cs, B,
                                  length, C, NH, 0, gen_max_len_, stream);
  // Row length-1 of each sequence in the last block's output, gathered into B rows.
  T_* last_rows = act(kProj);
  GPT2_CUDA_CHECK(cudaMemcpy2DAsync(
      last_rows, Cs * sizeof(T_), act(kResidual3) + (L - 1) * BT * Cs + (length - 1) * Cs,
      static_cast<size_t>(length) * Cs * sizeof(T_), Cs * sizeof(T_), B, cudaMemcpyDeviceToDevice,
      stream));
  generation_logits(last_rows, logits);
  gen_length_ = length;
}

template <typename T_>
void CudaModel<T_>::decode_step(const int* next_tokens, float* logits) {
  GPT2_CHECK(gen_length_ >= 1, gen_length_ < 0 ? "decode_step without a generation session"
                                               : "decode_step before prefill");
  GPT2_CHECK(gen_length_ < gen_max_len_, "decode_step past max_len: the sequences hold ",
             gen_length_, " of ", gen_max_len_, " tokens");
  check_parameters_whole("decode_step");
  const gpu::Context& ctx = *ctx_;
  cudaStream_t stream = ctx.stream();
  const int B = gen_B_, C = config_.channels, L = config_.num_layers, NH = config_.num_heads;
  const int pos = gen_length_;  // of the new tokens
  const size_t Cs = C;
  upload_tokens(next_tokens, nullptr, B, 1);  // checks the ids first
  gen_length_ = -1;  // no valid session should this throw half way
  // Position pos: wpe's row pos is row 0 of wpe + pos*C.
  gpu::encoder_forward(act(kEncoded), buf<int>(kInputs), param(kWte), param(kWpe) + pos * Cs, B,
                       1, C, stream);
  const auto decode_activations = [&](int l) {
    BlockActivations<T_> a = block_activations(l, static_cast<size_t>(B));
    a.ln1 = a.ln2 = act(kLnf);  // ln1 and ln2 hold the caches
    return a;
  };
  const FollowingLayerNorm<T_> first = ln1_of(0, decode_activations(0));
  gpu::layernorm_forward(first.out, first.mean, first.rstd, act(kEncoded), first.weight,
                         first.bias, B, 1, C, stream);
  for (int l = 0; l < L; ++l) {
    const BlockActivations<T_> a = decode_activations(l);
    // After the last block, generation_logits normalizes the rows it keeps.
    const FollowingLayerNorm<T_> next =
        l + 1 < L ? ln1_of(l + 1, decode_activations(l + 1)) : FollowingLayerNorm<T_>{};
    block_forward(l, a, B, 1, [&] {
      gpu::attention_kv_cache_write(key_cache(l), value_cache(l), a.qkv, B, 1, C, NH, pos,
                                    gen_max_len_, stream);
      gpu::attention_decode_forward(a.atty, a.qkv, key_cache(l), value_cache(l), B, C, NH,
                                    pos + 1, gen_max_len_, buf<float>(kDecodePartials), stream);
    }, next);
  }
  generation_logits(act(kResidual3) + (L - 1) * static_cast<size_t>(B) * Cs, logits);
  gen_length_ = pos + 1;
}

template <typename T_>
void CudaModel<T_>::generation_logits(const T_* rows, float* logits) {
  const gpu::Context& ctx = *ctx_;
  const int B = gen_B_, C = config_.channels;
  const int V = config_.vocab_size, Vp = config_.padded_vocab_size;
  // (B,1) rows through lnf and the classifier: the logits buffer holds at least batch_size rows.
  gpu::layernorm_forward(act(kLnf), buf<float>(kLnfMean), buf<float>(kLnfRstd), rows,
                         param(kLnfw), param(kLnfb), B, 1, C, ctx.stream());
  gpu::matmul_forward(act(kLogits), act(kLnf), param(kWte), static_cast<const T_*>(nullptr), B, 1,
                      C, Vp, ctx);
  std::vector<T_> host(static_cast<size_t>(B) * Vp);
  GPT2_CUDA_CHECK(cudaMemcpyAsync(host.data(), act(kLogits), host.size() * sizeof(T_),
                                  cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.synchronize();
  for (size_t b = 0; b < static_cast<size_t>(B); ++b)
    for (int v = 0; v < V; ++v) logits[b * V + v] = host_float(host[b * Vp + v]);
  sample_memory();
}

template <typename T_>
template <typename Use>
void CudaModel<T_>::with_update_gradients(Use&& use) const {
  if (!dp_) return use(buf<T_>(kGrads), static_cast<int64_t>(device_layout_.total()));
  const auto count = static_cast<int64_t>(dp_->reduced_count());
  if constexpr (std::is_same_v<T_, bf16>) {
    if (dp_->reduces_in_bf16()) return use(static_cast<const bf16*>(dp_->reduced()), count);
  }
  use(static_cast<const float*>(dp_->reduced()), count);
}

template <typename T_>
float CudaModel<T_>::grad_norm() {
  check_training("grad_norm");
  if (dp_) check_reduced("grad_norm");
  double squared = 0.0;
  with_update_gradients([&](const auto* grads, int64_t count) {
    squared = gpu::global_norm_squared_to_host(grads, count, buf<float>(kNormPartials),
                                               buf<double>(kNormResult), ctx_->stream());
  });
  // ZeRO-1: each rank squared its shard, added over the ranks in rank order; ZeRO-0: every rank
  // holds all of the summed gradient (the same bits everywhere).
  if (dp_ && dp_->sharded()) squared = sum_in_rank_order(dp_->comm(), squared);
  return static_cast<float>(std::sqrt(squared));
}

template <typename T_>
void CudaModel<T_>::adamw_step(const AdamWHyper& hyper, int step, float grad_scale) {
  check_training("adamw_step");
  GPT2_CHECK(step >= 1, "AdamW steps are 1-based (got ", step, ")");
  if (dp_) check_reduced("adamw_step");
  with_update_gradients([&](const auto* grads, int64_t) {
    gpu::adamw_update_segments(buf<T_>(kParams), buf<float>(kMaster), grads, buf<float>(kAdamM),
                               buf<float>(kAdamV), adamw_table_, hyper, step, grad_scale,
                               ctx_->stream());
  });
  if (dp_) dp_->parameters_updated();
  ctx_->synchronize();
  sample_memory();
}

template <typename T_>
Model::StepOutcome CudaModel<T_>::finish_step(const AdamWHyper& hyper, int step,
                                              float grad_clip, int micro_batches) {
  check_training("finish_step");
  GPT2_CHECK(step >= 1, "AdamW steps are 1-based (got ", step, ")");
  if (dp_) check_reduced("finish_step");
  cudaStream_t stream = ctx_->stream();
  gpu::StepScalars* scalars = step_scalars(kTrainingScalars);
  // The norm, the decision and the update on the device: the same arithmetic as the host path
  // (step_scalars.cuh), with one wait at the end for the values the metrics need. Data
  // parallel: the loss sum and (ZeRO-1) the norm's squares over the ranks in rank order, as
  // sum_in_rank_order adds them, then this rank's segments of the update.
  with_update_gradients([&](const auto* grads, int64_t count) {
    gpu::global_norm_squared(&scalars->norm_squared, grads, count, buf<float>(kNormPartials),
                             stream);
  });
  if (dp_) dp_->sum_step_scalars(scalars);
  gpu::clip_decision(scalars, micro_batches, grad_clip, stream);
  with_update_gradients([&](const auto* grads, int64_t) {
    gpu::adamw_update_segments(buf<T_>(kParams), buf<float>(kMaster), grads, buf<float>(kAdamM),
                               buf<float>(kAdamV), adamw_table_, hyper, step, 1.0f, stream,
                               &scalars->control);
  });
  if (dp_) dp_->parameters_updated();
  const gpu::StepScalars host = read_step_scalars(kTrainingScalars);
  sample_memory();
  StepOutcome outcome;
  outcome.loss = static_cast<float>(host.loss_sum / micro_batches);
  outcome.grad_norm = host.grad_norm;
  outcome.applied = host.control.skip == 0;
  return outcome;
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

}  // namespace

MemoryPlan plan_cuda_model_memory(const ModelOptions& options) {
  validate_cuda_options(options);
  MemoryPlan plan;
  // Items 0..kNumGpuBuffers-1 are the model's buffers, in GpuBuffer order (zero-byte items
  // included, so the enum indexes the plan); the Context allocates the cuBLASLt workspace.
  for (const GpuBufferSpec& spec : gpu_buffer_specs(options))
    plan.add(spec.group, spec.name, spec.bytes);
  plan.add("workspace", "cuBLASLt workspace (allocated by the CUDA context)",
           gpu::Context::kDefaultLtWorkspaceBytes);
  return plan;
}

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
  if (options.precision == Precision::kBf16) return std::make_unique<CudaModel<bf16>>(options);
  return std::make_unique<CudaModel<float>>(options);
}

}  // namespace gpt2
