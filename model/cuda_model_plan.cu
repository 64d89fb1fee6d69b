/**
 * @file cuda_model_plan.cu
 * @brief The CUDA model's buffers (GpuBufferSpec list), its memory plan and option checks.
 *
 * One list, gpu_buffer_specs, names every device buffer with its group and bytes; the memory
 * plan (plan_cuda_model_memory) and the allocations (CudaModel's constructor) both come from it.
 * Against CpuGpt2's buffers, all for memory: the attproj / fcproj outputs share one (B,T,C)
 * buffer (only the residual sums are needed later); the classifier never holds the logits of all
 * B*T positions but chunks of R rows in one (R,Vp) buffer, which the layers' backward then uses
 * as its workspace (dfch, dln2, datty, dqkv, dln1) (R = classifier_chunk_rows(): what fits in
 * that workspace, 2432 rows at d12 B=16 T=1024 in bf16, against 1.5 GiB for (B,T,Vp)).
 * Per-layer activations are (L,B,T,X) buffers whose layer l starts at l*B*T*X for the (B,T) of
 * the current forward, so a shorter forward (sampling) fits inside; with recompute_fc the fc
 * output and its GELU are one layer's (B,T,4C) buffers. Generation's key/value caches live in ln1
 * and ln2 (cuda_model_generation.cu): only the decode attention's split-K partials have a plan
 * item of their own.
 */
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "model/cuda_model_impl.cuh"

namespace gpt2::cuda_model_detail {

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

}  // namespace gpt2::cuda_model_detail

namespace gpt2 {

size_t layer_gradient_workspace_bytes(const ModelOptions& options) {
  if (!options.training) return 0;
  const size_t x = bf16_storage(options.precision) ? 2 : 4;
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
                             (bf16_storage(options.precision) ? 2 : 4);
    rows = 1;
    while (static_cast<size_t>(rows) * 2 * row_bytes <= kClassifierChunkBytes) rows *= 2;
    const int64_t shared_rows =
        static_cast<int64_t>(layer_gradient_workspace_bytes(options) / row_bytes) / 128 * 128;
    rows = std::max(rows, shared_rows);
  }
  // At least B rows: generation puts the B last-position logits at the buffer's start.
  return static_cast<int>(std::clamp<int64_t>(rows, options.batch_size, BT));
}

}  // namespace gpt2

namespace gpt2::cuda_model_detail {

gpu::AttentionConfig attention_config(const ModelOptions& options, bool whole) {
  gpu::AttentionConfig config;
  config.B = options.batch_size;
  config.T = whole ? options.seq_len : options.local_seq_len();
  config.C = options.config.channels;
  config.NH = options.config.num_heads;
  config.bf16 = bf16_storage(options.precision);
  config.kernel = gpu::select_attention_kernel(options.attention, options.flash_kernel,
                                               config.bf16, options.config.head_size());
  config.deterministic = options.deterministic_attention;
  config.backward = options.training;
  return config;
}

namespace {

/// Inference only: nothing a backward or an optimizer step would use. (The bf16 master copy
/// stays: set_parameters stages the fp32 parameters in it.)
void drop_training_buffers(std::vector<GpuBufferSpec>& s) {
  for (GpuBuffer id : {kGrads, kAdamM, kAdamV, kAdamWSegments, kDLnf, kDResidual,
                       kMatmulScratch, kLayernormScratch, kEncoderScratch, kNormPartials,
                       kNormResult})
    s[id].bytes = 0;
}

/// Writes item id of the specs: set(id, group, name, bytes).
struct SpecSetter {
  std::vector<GpuBufferSpec>& specs;
  void operator()(GpuBuffer id, const char* group, std::string name, size_t bytes) const {
    specs[id] = {group, std::move(name), bytes};
  }
};

/// The per-layer activations of the blocks' LayerNorms and fc layer (x bytes a value).
void set_block_activations(std::vector<GpuBufferSpec>& s, const ModelOptions& options,
                           size_t x) {
  const size_t BT = static_cast<size_t>(options.batch_size) * options.local_seq_len();
  const size_t C = options.config.channels, L = options.config.num_layers, f = 4;
  const SpecSetter set{s};
  // --precision fp8 (training): the block linears' backward reads their inputs' FP8 codes (kept
  // per layer in kFp8Inputs), so one layer's bf16 ln1 and GELU output are enough, and ln2's too
  // unless --recompute fc runs the fc GEMM again from it.
  const bool fp8 = options.precision == Precision::kFp8 && options.training;
  const size_t ln2_layers = fp8 && !options.recompute_fc ? 1 : L;
  set(kLn1, "activations", fp8 ? "ln1 (B,T,C), one layer: the backward reads its FP8 codes"
                               : "ln1 (L,B,T,C)",
      (fp8 ? 1 : L) * BT * C * x);
  set(kLn1Mean, "activations", "ln1 mean (L,B,T) fp32", L * BT * f);
  set(kLn1Rstd, "activations", "ln1 rstd (L,B,T) fp32", L * BT * f);
  set(kQkv, "activations", "qkv (L,B,T,3C)", L * BT * 3 * C * x);
  set(kLn2, "activations", ln2_layers == 1 ? "ln2 (B,T,C), one layer: the backward reads its FP8 "
      "codes" : "ln2 (L,B,T,C)", ln2_layers * BT * C * x);
  set(kLn2Mean, "activations", "ln2 mean (L,B,T) fp32", L * BT * f);
  set(kLn2Rstd, "activations", "ln2 rstd (L,B,T) fp32", L * BT * f);
  // --recompute fc: one layer's, recomputed by the fc GEMM in backward (the same bits).
  const size_t fc_layers = options.recompute_fc ? 1 : L;
  const char* fc_shape = options.recompute_fc ? "(B,T,4C), one layer: recomputed in backward"
                                              : "(L,B,T,4C)";
  const size_t gelu_layers = fp8 ? 1 : fc_layers;
  set(kFch, "activations", str_cat("fch ", fc_shape), fc_layers * BT * 4 * C * x);
  set(kFchGelu, "activations",
      str_cat("fch_gelu ", fp8 ? "(B,T,4C), one layer: the backward reads its FP8 codes"
                               : fc_shape),
      gelu_layers * BT * 4 * C * x);
}

/// --precision fp8 (training): the block linears' FP8 weights, scales, inputs and operands.
void set_fp8_buffers(std::vector<GpuBufferSpec>& s, const ModelOptions& options) {
  const ModelConfig& cfg = options.config;
  const size_t BT = static_cast<size_t>(options.batch_size) * options.local_seq_len();
  const bool fp8 = options.precision == Precision::kFp8 && options.training;
  const SpecSetter set{s};
  set(kFp8Weights, "parameters", "FP8 block weights, both orders (E4M3)",
      fp8 ? Fp8Linears::weight_bytes(cfg) : 0);
  set(kFp8Scales, "workspace", "FP8 scales, amax histories (fp32) and saturation counts",
      fp8 ? Fp8Linears::scale_bytes(cfg) : 0);
  set(kFp8Inputs, "activations", "FP8 block inputs, transposed, for the weight gradients "
      "(L,7C,B*T) E4M3", fp8 ? Fp8Linears::input_bytes(cfg, BT) : 0);
  set(kFp8Operands, "workspace", "FP8 GEMM operands: input, gradient in both orders (2 x B,T,4C)",
      fp8 ? Fp8Linears::operand_bytes(cfg, BT) : 0);
  const size_t chunk_rows = static_cast<size_t>(classifier_chunk_rows(options));
  const bool dwte = options.fp8_classifier_weight_gradient;
  set(kFp8Classifier, "workspace",
      str_cat("FP8 classifier: wte both orders (2 x Vp,C), lnf ", dwte ? "both orders (2 x " : "(",
              "B,T,C), a chunk's dlogits (R,Vp) codes"),
      fp8 && options.fp8_classifier ? Fp8Classifier::bytes(cfg, BT, chunk_rows, dwte) : 0);
}

}  // namespace

std::vector<GpuBufferSpec> gpu_buffer_specs(const ModelOptions& options) {
  const ModelConfig& cfg = options.config;
  const size_t B = options.batch_size, T = options.local_seq_len(), C = cfg.channels;
  const size_t L = cfg.num_layers, Vp = cfg.padded_vocab_size;
  const size_t BT = B * T;
  const bool bf16_storage = gpt2::bf16_storage(options.precision);
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
  const SpecSetter set{s};
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
  set_block_activations(s, options, x);
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
  set_fp8_buffers(s, options);
  set(kInputs, "workspace", "inputs (B,T) int32", BT * sizeof(int));
  set(kTargets, "workspace", "targets (B,T) int32", BT * sizeof(int));
  if (!options.training) drop_training_buffers(s);
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
  if (options.grad_reduce == GradReduce::kBf16 && !bf16_storage(options.precision))
    GPT2_USAGE_FAIL("bf16 gradient sums (--grad-reduce bf16) need bf16 gradients (--precision "
                    "bf16); an fp32 run reduces in fp32");
  if (config.channels % 8 != 0)
    GPT2_USAGE_FAIL("the CUDA backend needs the channel count to be a multiple of 8 (got ",
                    config.channels, ")");
  if (static_cast<int64_t>(options.batch_size) * config.num_heads > 65535)
    GPT2_USAGE_FAIL("B*NH = ", static_cast<int64_t>(options.batch_size) * config.num_heads,
                    " exceeds the CUDA grid limit of 65535");
  const int context = options.context_size();
  if (options.fp8_classifier && options.precision != Precision::kFp8)
    GPT2_USAGE_FAIL("--fp8-classifier on needs --precision fp8");
  if (options.fp8_classifier_weight_gradient && !options.fp8_classifier)
    GPT2_USAGE_FAIL("the FP8 classifier weight gradient (--fp8-classifier all) needs the FP8 "
                    "classifier");
  if (options.fp8_fast_accumulation && options.precision != Precision::kFp8)
    GPT2_USAGE_FAIL("--fp8-fast-accumulation on needs --precision fp8");
  if (options.fp8_amax_history < 1 || options.fp8_amax_history > gpu::kFp8History)
    GPT2_USAGE_FAIL("--fp8-amax-history must be 1 to ", gpu::kFp8History, " (got ",
                    options.fp8_amax_history, ")");
  if (options.fp8_margin < 0 || options.fp8_margin > gpu::kFp8MaxMargin)
    GPT2_USAGE_FAIL("--fp8-margin must be 0 to ", gpu::kFp8MaxMargin, " (got ",
                    options.fp8_margin, ")");
  if (options.fp8_gradient_margin < 0 || options.fp8_gradient_margin > gpu::kFp8MaxMargin)
    GPT2_USAGE_FAIL("--fp8-gradient-margin must be 0 to ", gpu::kFp8MaxMargin, " (got ",
                    options.fp8_gradient_margin, ")");
  if (options.precision == Precision::kFp8) {
    if (options.fp8_classifier && config.padded_vocab_size % 16 != 0)
      GPT2_USAGE_FAIL("--fp8-classifier needs the padded vocabulary to be a multiple of 16 (got ",
                      config.padded_vocab_size, ")");
    if (options.world_size() > 1 || context > 1)
      GPT2_USAGE_FAIL("--precision fp8 trains on one GPU for now: FP8 GEMMs with data or "
                      "context parallelism are not done yet (use --precision bf16)");
    if (config.channels % 16 != 0)
      GPT2_USAGE_FAIL("--precision fp8 needs the channel count to be a multiple of 16 (FP8 "
                      "GEMMs' dimensions; got ", config.channels, ")");
    if (static_cast<int64_t>(options.batch_size) * options.seq_len % 16 != 0)
      GPT2_USAGE_FAIL("--precision fp8 needs B*T to be a multiple of 16 (the FP8 weight "
                      "gradient's inner dimension; got B*T = ",
                      static_cast<int64_t>(options.batch_size) * options.seq_len, ")");
  }
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

}  // namespace gpt2::cuda_model_detail

namespace gpt2 {

MemoryPlan plan_cuda_model_memory(const ModelOptions& options) {
  cuda_model_detail::validate_cuda_options(options);
  MemoryPlan plan;
  // Items 0..kNumGpuBuffers-1 are the model's buffers, in GpuBuffer order (zero-byte items
  // included, so the enum indexes the plan); the Context allocates the cuBLASLt workspace.
  for (const cuda_model_detail::GpuBufferSpec& spec :
       cuda_model_detail::gpu_buffer_specs(options))
    plan.add(spec.group, spec.name, spec.bytes);
  plan.add("workspace", "cuBLASLt workspace (allocated by the CUDA context)",
           gpu::Context::kDefaultLtWorkspaceBytes);
  return plan;
}

}  // namespace gpt2
