/**
 * @file model.h
 * @brief The backend interface of a GPT-2 model: one implementation per device.
 *
 * A Model owns parameters (with fp32 master copies), gradients, AdamW moments and the
 * activations for micro-batches of shape (B, T) fixed at construction. The trainer drives a
 * step with one host round trip:
 *   zero_grad(); queue_forward_backward() per micro-batch (expect_last_micro_batch() before
 *   the last); reduce_gradients(); finish_step();
 * and tests also step by step: forward_backward(), reduce_gradients(), grad_norm(),
 * adamw_step(). Parameters cross the interface as fp32 in ParameterLayout order (checkpoints,
 * tests). Losses are the mean over the B*T positions of the micro-batch (context parallelism:
 * a rank's share of it, see ModelOptions::context_comm).
 * Data parallel (ModelOptions::comm with world size > 1): every rank holds a replica of the
 * parameters and runs the same calls in the same order on its own micro-batches; the calls
 * marked "collective" below communicate, so every rank must make them. The gradients are
 * reduced in the fixed buckets of gradient_bucket_plan (parallel/shard_plan.h). ZeRO-0: all-reduce
 * of each bucket, every rank updates every parameter. ZeRO-1: reduce-scatter of each bucket,
 * each rank keeps the AdamW moments of its shard only (the CUDA backend its fp32 master
 * weights too) and updates its shard, then the parameters are all-gathered. A world size of 1
 * is the single-process model whatever the stage, except that a CUDA model given a device
 * communicator (NCCL) runs the data-parallel path at world size 1 too: the same losses,
 * through the collectives.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/shard_plan.h"
#include "kernels/common/attention_kind.h"
#include "kernels/common/adamw_hyper.h"
#include "model/config.h"
#include "model/memory_plan.h"

namespace gpt2 {

enum class DeviceKind { kCpu, kCuda };
/// fp32: exact fp32 throughout. bf16: mixed precision (bf16 storage and GEMM inputs, fp32
/// master weights and accumulation). fp8: bf16's, with the block linears' GEMMs in FP8 on the
/// GPU (model/cuda_fp8_linears.cuh; training only: evaluation and generation run in bf16).
enum class Precision { kFp32, kBf16, kFp8 };
/// Whether parameters and activations are stored in bf16 (bf16 and fp8).
inline bool bf16_storage(Precision precision) { return precision != Precision::kFp32; }
/// The element type in which data parallelism sums the gradients over the ranks.
enum class GradReduce { kFp32, kBf16 };

const char* to_string(AttentionKind kind);   // "naive" | "flash"
const char* to_string(DeviceKind kind);      // "cpu" | "cuda"
const char* to_string(Precision precision);  // "fp32" | "bf16" | "fp8"
const char* to_string(GradReduce reduce);    // "fp32" | "bf16"

struct ModelOptions {
  ModelConfig config;
  int batch_size = 1;  // B of every micro-batch
  int seq_len = 1;     // T of every micro-batch, <= config.max_seq_len
  AttentionKind attention = AttentionKind::kFlash;
  Precision precision = Precision::kFp32;
  FlashKernelChoice flash_kernel = FlashKernelChoice::kAuto;  // GPU only
  /// GPU flash backward bit-identical run to run (slower). Off here, as --attn-deterministic
  /// is; the kernel-level AttentionConfig::deterministic (kernels/gpu/attention.cuh) defaults
  /// to true on purpose: its tests and benchmarks want the fixed-order dQ unless they ask
  /// otherwise, and the CUDA model always sets it from this field, so that default never
  /// reaches a run.
  bool deterministic_attention = false;
  /// CUDA: rows of (B*T) whose logits the classifier holds at once (0: automatic, what fits in
  /// the backward workspace or a 256 MiB budget; see classifier_chunk_rows in cuda_model.h).
  /// The same losses and gradients for any value up to GEMM summation order (bf16: wte's
  /// gradient takes one rounding per chunk).
  int classifier_chunk_rows = 0;
  /// CUDA: keep one layer's fc output and GELU (B,T,4C) instead of every layer's, and
  /// recompute them in backward by the same fc GEMM (one more per layer): the same bits, and
  /// 2 (L-1) B T 4C fewer elements held (what grows with T besides attention's own).
  bool recompute_fc = false;
  /// --precision fp8 (CUDA): the classifier's forward and input-gradient GEMMs in FP8 too
  /// (model/cuda_fp8_classifier.cuh); off: they stay bf16.
  bool fp8_classifier = false;
  /// With fp8_classifier (--fp8-classifier all): its weight gradient (dwte) in FP8 as well.
  bool fp8_classifier_weight_gradient = false;
  /// --precision fp8 (CUDA): the forward GEMMs (block linears and FP8 classifier) with
  /// Hopper's fast FP8 accumulation, as Transformer Engine's recipe runs them; the gradients'
  /// GEMMs keep the periodic fp32 accumulation either way (docs/fp8.md).
  bool fp8_fast_accumulation = false;
  /// --precision fp8 (CUDA): the delayed scales of the blocks' inputs and gradients and of the
  /// classifier's input: the amaxes each looks back over (1 to 16) and their margins (scales
  /// 2^margin smaller than fp8_max / amax; kernels/gpu/fp8_scale.cuh): fp8_margin the inputs',
  /// fp8_gradient_margin the blocks' output gradients'.
  int fp8_amax_history = 16;
  int fp8_margin = 0;
  int fp8_gradient_margin = 4;
  /// CUDA: replay a training micro-batch's forward and backward (about 440 launches at d12),
  /// with the collectives data parallelism runs inside them, as one CUDA graph, captured on the
  /// second call of each kind of micro-batch: the same kernels on the same buffers, so the same
  /// bits, without the launch gaps. Ignored by the CPU backend.
  bool cuda_graphs = true;
  /// false: inference only (generation, evaluate): no gradients, no AdamW moments and no
  /// backward workspace are planned or allocated; forward_backward, grad_norm, adamw_step and
  /// the optimizer-state calls throw gpt2::Error, zero_grad does nothing.
  bool training = true;
  /// Data parallelism (training): the job's communicator (nullptr: one process; it must
  /// outlive the model), the ZeRO stage (0 or 1) and the bucket size of the gradient
  /// reductions (parallel/shard_plan.h). The CPU backend takes a host communicator. The CUDA
  /// backend takes a device one (NCCL), with which it runs the data-parallel path at any world
  /// size, 1 included (model/cuda_data_parallel.h); a host communicator of world size 1 is the
  /// plain single-GPU path.
  Communicator* comm = nullptr;
  /// Context parallelism (model/context_parallel.h): the ranks that share each sequence, a
  /// group of comm's (nullptr or a group of 1: whole sequences; must outlive the model).
  /// seq_len stays the sequences' length; forward_backward and evaluate then take this rank's
  /// rows of each sequence, (B, context_shard(seq_len, group size, group rank).local_len()),
  /// and return their share of the mean loss (the group's sum is the mean). CPU backend,
  /// flash attention.
  Communicator* context_comm = nullptr;
  int zero_stage = 0;
  size_t bucket_elements = 0;  // 0: the backend's default (gradient_bucket_plan)
  /// Data parallel: the sums over the ranks in fp32, or in bf16 (communicator.h: each addition
  /// rounded to bf16; half the bytes). CUDA: bf16 needs bf16 precision, whose gradients are
  /// then reduced as the backward left them (fp32 widens them first); the reduced gradients
  /// are bf16 and AdamW reads them in fp32. CPU (fp32 gradients): bf16 rounds each rank's
  /// gradients to bf16 before the sum and widens the sum back, the GPU's arithmetic on the
  /// host (tests bound its error).
  GradReduce grad_reduce = GradReduce::kFp32;
  /// CUDA data parallel: start reducing gradient buckets during the last micro-batch's
  /// backward (see expect_last_micro_batch) instead of after it. Off by default: on two H100s
  /// the collectives beside the backward slowed it by more than they hid
  /// (bench/results/data_parallel_tuning.md).
  bool overlap_communication = false;
  /// CUDA data parallel, ZeRO-1: gather the updated parameters during the next forward (each
  /// layer waits for its own buckets) instead of right after the update. Off by default, as
  /// measured alike.
  bool overlap_gather = false;

  int world_size() const { return comm != nullptr ? comm->world_size() : 1; }
  int context_size() const { return context_comm != nullptr ? context_comm->world_size() : 1; }
  /// Rows per sequence a forward takes: seq_len, or this rank's share of it.
  int local_seq_len() const;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelOptions& options() const = 0;
  virtual DeviceKind device() const = 0;
  virtual std::string device_name() const = 0;  // "CPU (2 threads)", "NVIDIA H100 80GB HBM3"
  /// The attention kernel in use: "naive", "flash" (CPU), "flash-portable", "flash-hopper"...
  virtual std::string attention_kernel() const = 0;

  /// fp32 parameters in ParameterLayout order (ParameterLayout::total floats).
  /// Data parallel: every rank passes the same parameters to set_parameters; get_parameters is
  /// collective (a CUDA model under ZeRO-1 gathers its sharded fp32 master weights).
  virtual void set_parameters(const float* params) = 0;
  virtual void get_parameters(float* params) const = 0;

  virtual void zero_grad() = 0;
  /// One micro-batch, inputs/targets (B,T). Parameter gradients are accumulated (+=) with the
  /// gradient of loss_scale * mean_bt(loss[b,t]); with loss_scale = 1/grad_accum_steps the sum
  /// over micro-batches is the gradient of the mean loss. Returns mean_bt(loss).
  virtual float forward_backward(const int* inputs, const int* targets, float loss_scale) = 0;
  /// Forward only (validation): mean loss over (B,T); gradients untouched.
  virtual float evaluate(const int* inputs, const int* targets) = 0;

  // --- Generation -----------------------------------------------------------------------------
  // A generation session advances `batch` sequences together, one position per decode step:
  //   start_generation(batch, max_len);
  //   prefill(prompts, length, logits);           // logits of position length-1
  //   decode_step(next_tokens, logits);           // position length, then length+1, ...
  // Shapes: prompts (batch, length) row-major token ids; next_tokens (batch); logits
  // (batch, V) fp32, the classifier's raw outputs over the V real tokens (the padding columns
  // dropped), before any softmax or temperature. They equal the logits a full forward over
  // each sequence's tokens gives at its last position, to rounding.
  // Limits: 1 <= batch <= options().batch_size; 1 <= max_len <= options().seq_len; token ids
  // in [0, V). The sequences hold at most max_len tokens: prefill's length must be <= max_len,
  // and decode_step throws gpt2::Error (computing nothing) once they hold max_len tokens. To
  // go on past max_len, prefill again with a window of the latest tokens (it restarts every
  // sequence). A violated limit, or a prefill / decode_step without a session, throws
  // gpt2::Error.
  // Parameters, gradients and the optimizer state are never touched, so generation can run
  // between training steps; activations are overwritten (a backward needs a new
  // forward_backward), and forward_backward or evaluate end the session.
  // Backends: both keep per-layer key/value caches (cpu_model.h, cuda_model.cu), so a decode
  // step costs one position's forward.

  /// Begins a session (ending any previous one) with room for max_len tokens per sequence.
  virtual void start_generation(int batch, int max_len) = 0;
  /// (Re)starts every sequence with prompts (batch, length), 1 <= length <= max_len; writes
  /// logits (batch, V) of position length-1.
  virtual void prefill(const int* prompts, int length, float* logits) = 0;
  /// Appends next_tokens (batch) at position generation_length(); writes their logits
  /// (batch, V).
  virtual void decode_step(const int* next_tokens, float* logits) = 0;
  /// Tokens per sequence so far: 0 after start_generation, -1 without a session.
  virtual int generation_length() const = 0;

  /// Says that the next forward_backward is the step's last micro-batch, so that a backend
  /// that overlaps communication with compute may start reducing gradient buckets while that
  /// backward runs (reduce_gradients then completes the reductions; another forward_backward
  /// before it throws gpt2::Error). Optional: without it every reduction starts in
  /// reduce_gradients. Not collective. Backends without overlap ignore it.
  virtual void expect_last_micro_batch() {}

  /// Collective. Makes every parameter whole on this rank before a forward-only call
  /// (evaluate, generation), which a CUDA model under ZeRO-1 with overlapped communication
  /// refuses until then: its update leaves the other ranks' shards to be gathered during the
  /// next training forward. Call it on every rank after finish_step (or adamw_step) when an
  /// evaluation or a generation on some rank follows. Backends without that nothing to do.
  virtual void synchronize_parameters() {}

  /// Collective. Sums the gradients accumulated by every rank (each rank's loss_scale carries
  /// 1/world_size besides 1/grad_accum_steps, so the sum is the gradient of the global batch's
  /// mean loss). ZeRO-1: only this rank's shard holds the sum afterwards. Once per step, after
  /// the last forward_backward and before grad_norm and adamw_step, which throw without it when
  /// the world size is above 1. World size 1: nothing.
  virtual void reduce_gradients() = 0;
  /// Global L2 norm of the accumulated parameter gradients. Collective with several ranks: the
  /// norm of the summed gradient, each rank's part (the squares of its shard, in double) added
  /// in rank order, so every rank gets the same bits.
  virtual float grad_norm() = 0;
  /// AdamW on every tensor (weight decay on the 2-D weights only); grads scaled by grad_scale
  /// first (clipping). step is 1-based. ZeRO-1: collective (this rank's shard, then the
  /// all-gather of the parameters).
  virtual void adamw_step(const AdamWHyper& hyper, int step, float grad_scale) = 0;

  // --- A training step with one host round trip ------------------------------------------------
  //   zero_grad();
  //   queue_forward_backward(...) per micro-batch;   // nothing waits for the device
  //   reduce_gradients();
  //   StepOutcome outcome = finish_step(hyper, step, grad_clip, micro_batches);
  // gives the bits of forward_backward per micro-batch, grad_norm, the clipping and finiteness
  // rule below and adamw_step, which the default implementations call. A GPU backend keeps the
  // loss sum, the norm and the decision on the device and waits once, in finish_step.

  /// forward_backward without waiting for its loss: the micro-batch's mean loss joins the
  /// step's loss sum, which finish_step reads.
  virtual void queue_forward_backward(const int* inputs, const int* targets, float loss_scale) {
    queued_loss_sum_ += forward_backward(inputs, targets, loss_scale);
  }
  struct StepOutcome {
    float loss = 0.0f;       // mean over the step's micro-batches (every rank's)
    float grad_norm = 0.0f;  // of the summed gradients, before clipping
    bool applied = false;    // false: the loss or the norm was not finite; nothing was updated
    /// --precision fp8: the tensors whose delayed scale lagged so far behind their values
    /// that their casts this step saturated (clamped values); -1 for other precisions.
    int fp8_saturated = -1;
  };
  /// Ends a step: loss = float(sum of the queued mean losses (over the ranks, in rank order) /
  /// micro_batches) with micro_batches the step's count over every rank; norm = grad_norm();
  /// when both are finite, adamw_step(hyper, step, s), s = grad_clip / norm when
  /// grad_clip > 0 and norm > grad_clip, else 1. Collective with several ranks.
  virtual StepOutcome finish_step(const AdamWHyper& hyper, int step, float grad_clip,
                                  int micro_batches);

  /// The whole AdamW m and v (ParameterLayout::total floats each). ZeRO-1: collective; the
  /// shards are all-gathered and every rank receives the whole state.
  virtual void get_optimizer_state(float* m, float* v) const = 0;
  /// From the whole m and v, which every rank passes; ZeRO-1 keeps its shard.
  virtual void set_optimizer_state(const float* m, const float* v) = 0;

  /// What else a bitwise resume needs, as opaque bytes for the training state: the CUDA model's
  /// FP8 scales and amax histories with --precision fp8; empty for every other model.
  virtual std::vector<uint8_t> precision_state() const { return {}; }
  /// Restores precision_state()'s bytes; false when this model keeps no such state (the bytes
  /// are ignored: a bf16 run resuming an fp8 run's state). Empty bytes restore nothing. Throws
  /// gpt2::Error for bytes this model cannot take.
  virtual bool set_precision_state(const std::vector<uint8_t>& bytes) {
    (void)bytes;
    return false;
  }
  /// --precision fp8: the block linears' inputs and gradients whose casts saturated since the
  /// model was made ("layer 3 fc input"), each with the count of steps that found it so, in
  /// layer order (synchronizes); empty for every other model.
  virtual std::vector<std::pair<std::string, int64_t>> fp8_saturated_tensors() const {
    return {};
  }

  /// Data parallel on a device: the GPU time of the last step's collectives (reductions and
  /// all-gathers, measured with events on the communication stream) and the part of it the
  /// compute stream waited for. nullopt where the backend does not measure it (the CPU; a
  /// plain single-GPU model). Call after adamw_step.
  struct CommunicationTime {
    double collective_ms = 0.0;
    double exposed_ms = 0.0;
  };
  virtual std::optional<CommunicationTime> last_step_communication() const {
    return std::nullopt;
  }

  /// The plan this model allocated by.
  virtual const MemoryPlan& memory_plan() const = 0;
  /// Measured high-water mark of memory on the model's device, in bytes (CPU: process max RSS;
  /// CUDA: device memory in use at its peak, measured).
  virtual size_t peak_memory_bytes() const = 0;

 protected:
  /// The loss sum of the default queue_forward_backward since the last finish_step.
  double queued_loss_sum_ = 0.0;
  /// finish_step after the loss sum is known: the rule above on the host, given this rank's sum.
  StepOutcome finish_step_on_host(const AdamWHyper& hyper, int step, float grad_clip,
                                  int micro_batches, double local_loss_sum);
};

/// The CUDA model's default bucket: larger than any layer of the GPT-2 family, so that each
/// layer is one collective.
constexpr size_t kDefaultLayerBucketElements = size_t{1} << 26;

/// The buckets in which `device`'s backend reduces the gradients over world_size ranks
/// (parallel/shard_plan.h), as seen by `rank`. CPU: llm.c's order in buckets of bucket_elements
/// (0: kDefaultBucketElements). CUDA: the layer-major order (parameters.h), each layer, wte,
/// wpe and lnf in buckets of their own of up to bucket_elements (0:
/// kDefaultLayerBucketElements).
ShardPlan gradient_bucket_plan(const ModelConfig& config, DeviceKind device,
                               size_t bucket_elements, int world_size, int rank);

/// The plan the backend for `device` would allocate by, computed without allocating (validates
/// the options like the backend's constructor). Throws gpt2::Error for cuda in a build without
/// the CUDA backend.
MemoryPlan plan_model_memory(const ModelOptions& options, DeviceKind device);

/// CPU backend (always available).
std::unique_ptr<Model> make_cpu_model(const ModelOptions& options);
/// CUDA backend; throws gpt2::Error when not built or no GPU is present.
std::unique_ptr<Model> make_cuda_model(const ModelOptions& options);
/// True when the CUDA backend is compiled in and a CUDA device is visible.
bool cuda_backend_available(std::string* why_not = nullptr);
/// Makes the GPU of a rank that is local_rank on its node current for this thread (device
/// local_rank; device 0 when only one is visible, as with one GPU per task), before anything
/// touches a GPU, so that the ranks of a node do not all open a context on device 0. Does
/// nothing without the CUDA backend, or when the node has fewer visible GPUs than that (NCCL's
/// setup then says so).
void select_gpu_of_local_rank(int local_rank);

}  // namespace gpt2
