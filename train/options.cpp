#include "train/options.h"

#include <filesystem>
#include <limits>
#include <utility>

#include <cxxopts.hpp>

#include "base/command_line.h"
#include "base/error.h"
#include "base/file_io.h"
#include "data/paths.h"
#include "parallel/nccl_communicator.h"
#include "model/checkpoint.h"
#include "model/context_parallel.h"
#include "model/hf_checkpoint.h"
#include "train/run_files.h"

namespace gpt2 {
namespace {

// Every option is declared as a string and converted here, so that a bad value's message
// names the option and the value (cxxopts' own conversion errors name neither clearly).
cxxopts::Options make_options() {
  cxxopts::Options options("gpt2-train", "Train GPT-2 on token shards (CPU or CUDA).");
  auto s = [] { return cxxopts::value<std::string>(); };
  options.add_options()
      ("train-data", "training shards (glob); default: the embedded data", s())
      ("val-data", "validation shards (glob); default: the embedded data's, or none (no "
       "validation) when --train-data is given", s())
      ("model", "dN, gpt2[-medium|-large|-xl], an llm.c checkpoint path, or hf:DIR (a Hugging "
       "Face directory: config.json + model.safetensors) (default: d12 on cuda, d2 on cpu)", s())
      ("max-seq-len", "rows of the position embedding (default 1024; from the model for a "
       "checkpoint or hf:DIR)", s())
      ("device", "auto | cuda | cpu", s()->default_value("auto"))
      ("attn", "naive | flash", s()->default_value("flash"))
      ("attn-kernel", "GPU flash kernel: auto | portable | hopper (auto: hopper on sm_90 with bf16)", s()->default_value("auto"))
      ("attn-deterministic", "GPU flash backward bit-identical run to run (attention forward+backward 0-4% slower on an H100 from T = 2K; below, both settings run it): 0 | 1", s()->default_value("0"))
      ("precision", "fp32 | bf16 | fp8 (bf16 with the block linears' GEMMs in FP8; one GPU "
       "of sm_89 or newer) (default: bf16 on cuda, fp32 on cpu)", s())
      ("batch-size", "B, sequences per micro-batch (default: 16 on cuda, 4 on cpu)", s())
      ("seq-len", "T, tokens per sequence (default: 1024 on cuda, 64 on cpu)", s())
      ("total-batch-size", "tokens per optimizer step, a multiple of B*T*world (with "
       "--context-parallel N: B*T*world/N) (default: that product)", s())
      ("steps", "optimizer steps", s()->default_value("50"))
      ("lr", "peak learning rate", s()->default_value("6e-4"))
      ("warmup-steps", "linear warm-up steps", s()->default_value("0"))
      ("lr-schedule", "cosine | linear | constant", s()->default_value("cosine"))
      ("final-lr-frac", "final learning rate as a fraction of --lr, in [0, 1]", s()->default_value("0.1"))
      ("weight-decay", "AdamW weight decay (2-D weights only)", s()->default_value("0.1"))
      ("grad-clip", "clip the global gradient norm to this (0 disables)", s()->default_value("1.0"))
      ("val-every", "validate every N steps and at the last step (0 disables; with --train-data "
       "it needs --val-data)", s()->default_value("25"))
      ("val-steps", "validation batches per evaluation", s()->default_value("10"))
      ("sample-every", "sample text every N steps (0 disables)", s()->default_value("0"))
      ("sample-tokens", "tokens per sample", s()->default_value("64"))
      ("out", "directory for metrics.jsonl, loss.svg, config.json, summary.json and "
       "checkpoints", s()->default_value("out"))
      ("checkpoint-every", "checkpoint every N steps and at the last step (0: only the final "
       "pair, see --save-final)", s()->default_value("0"))
      ("save-final", "1 saves the model and training state at the end of the run and when a "
       "signal stops it, whatever --checkpoint-every says; 0 does not", s()->default_value("1"))
      ("keep-checkpoints", "keep the newest N checkpoint pairs in --out (0 keeps all)",
       s()->default_value(std::to_string(kDefaultKeepCheckpoints)))
      ("resume", "continue the run that last used --out from its latest checkpoint pair that "
       "verifies")
      ("overwrite", "start a new run in an --out holding an earlier run's checkpoints, removing "
       "them (without it, such an --out is refused)")
      ("on-nonfinite", "a step with a non-finite loss or gradient norm: stop (exit 1) or "
       "skip-step (skip its update; stop after 10 in a row)", s()->default_value("stop"))
      ("seed", "seed of initialization, data order and sampling", s()->default_value("1337"))
      ("zero", "data parallel (several ranks): 0 all-reduces the gradients, 1 also shards the "
       "AdamW state across the ranks (ZeRO-1) (default: 1 with several ranks)", s())
      ("comm", "collectives of a --device cuda job: auto (NCCL with several ranks) | nccl "
       "(NCCL at world size 1 too: the data-parallel path on one GPU)", s()->default_value("auto"))
      ("overlap-comm", "--device cuda with NCCL: 1 reduces gradient buckets during the last "
       "micro-batch's backward and (ZeRO-1) gathers the updated parameters during the next "
       "forward; 0 runs each after its phase (faster on two H100s); reduce or gather overlaps "
       "that one only", s()->default_value("0"))
      ("context-parallel", "ranks that share each sequence (world = data-parallel replicas x "
       "N; each rank holds 2 of 2N chunks of every sequence; flash attention; on the GPU "
       "--seq-len >= 256N)",
       s()->default_value("1"))
      ("grad-reduce", "data parallel: sum the gradients over the ranks in fp32 or bf16 (half the "
       "bytes, each addition rounded to bf16) (default: bf16 with --precision bf16, else fp32)",
       s())
      ("grad-bucket", "data parallel: the most gradient elements in one collective (default: "
       "one bucket per layer on cuda, 1048576 on cpu)", s())
      ("classifier-chunk-rows", "--device cuda: rows of B*T whose logits the classifier holds "
       "at once (0: automatic, a 256 MiB budget; at least B, at most B*T)", s()->default_value("0"))
      ("fp8-classifier", "--precision fp8: on | off | all (on: the classifier's forward and "
       "input-gradient GEMMs in FP8 too, E4M3 lnf and wte, E5M2 logit gradients written by the "
       "cross-entropy; all: its weight gradient as well, on an H100 1-3% more tokens/s, about "
       "0.7% more loss at d12 in 2000 steps; docs/fp8.md) (default: on with --precision fp8)", s())
      ("fp8-fast-accumulation", "--precision fp8: on | off (the forward GEMMs with Hopper's fast "
       "FP8 accumulation, as Transformer Engine's recipe: 2-3% more tokens/s; the gradients' "
       "GEMMs never; docs/fp8.md) (default: on with --precision fp8)", s())
      ("fp8-amax-history", "--precision fp8: the amaxes, one a step, that a delayed scale (the "
       "blocks' inputs and gradients, the classifier's input) looks back over, 1 to 16 "
       "(default: 16)", s())
      ("fp8-margin", "--precision fp8: the inputs' delayed scales (E4M3) 2^N smaller than "
       "fp8_max / amax, headroom for tensors that grow between updates, 0 to 8 (default: 0)",
       s())
      ("fp8-gradient-margin", "--precision fp8: the same for the blocks' output gradients "
       "(E5M2; their amaxes jump more often, and E5M2 has 31 binades to spare), 0 to 8 "
       "(default: 4)", s())
      ("recompute", "--device cuda: none | fc (keep one layer's fc output and GELU instead of "
       "every layer's and recompute them in backward with one more fc GEMM per layer; the same "
       "bits, less memory for long context)", s()->default_value("none"))
      ("cuda-graph", "--device cuda: on | off (replay each micro-batch's forward and backward, "
       "collectives included, as one CUDA graph, captured at the second micro-batch of its kind: "
       "the same bits without the gaps between 440 launches)", s()->default_value("on"))
      ("h,help", "print this help");
  return options;
}

}  // namespace

AttentionKind parse_attention(const std::string& name) {
  if (name == "naive") return AttentionKind::kNaive;
  if (name == "flash") return AttentionKind::kFlash;
  GPT2_USAGE_FAIL("--attn must be naive or flash (got '", name, "')");
}

FlashKernelChoice parse_flash_kernel(const std::string& name) {
  if (name == "auto") return FlashKernelChoice::kAuto;
  if (name == "portable") return FlashKernelChoice::kPortable;
  if (name == "hopper") return FlashKernelChoice::kHopper;
  GPT2_USAGE_FAIL("--attn-kernel must be auto, portable or hopper (got '", name, "')");
}

NonFinitePolicy parse_nonfinite_policy(const std::string& name) {
  if (name == "stop") return NonFinitePolicy::kStop;
  if (name == "skip-step") return NonFinitePolicy::kSkipStep;
  GPT2_USAGE_FAIL("--on-nonfinite must be stop or skip-step (got '", name, "')");
}

const char* to_string(NonFinitePolicy policy) {
  switch (policy) {
    case NonFinitePolicy::kStop: return "stop";
    case NonFinitePolicy::kSkipStep: return "skip-step";
  }
  return "unknown";
}

std::string usage_text() { return make_options().help(); }

namespace {

/// The parsed command line's values by option name.
struct ParsedOptions {
  const cxxopts::ParseResult& result;
  std::string text(const char* name) const { return result[name].as<std::string>(); }
  bool given(const char* name) const { return result.count(name) > 0; }
  /// An on | off option's value; anything else is a usage error naming the option.
  bool on_off(const char* name) const {
    const std::string value = text(name);
    if (value != "on" && value != "off")
      GPT2_USAGE_FAIL("--", name, " must be on or off (got '", value, "')");
    return value == "on";
  }
};

// The data, the model and its shape, the device, attention and precision.
void parse_model_and_shape(const ParsedOptions& o, CommandLine& cli) {
  auto text = [&](const char* name) { return o.text(name); };
  auto given = [&](const char* name) { return o.given(name); };
  TrainConfig& config = cli.config;
  ModelOptions& model = config.model;
  if (given("train-data")) config.train_data.pattern = text("train-data");
  if (given("val-data")) config.val_data.pattern = text("val-data");
  if (given("train-data") && config.train_data.pattern.empty())
    GPT2_USAGE_FAIL("--train-data is empty");
  if (given("val-data") && config.val_data.pattern.empty()) GPT2_USAGE_FAIL("--val-data is empty");
  if (given("model")) {
    cli.model = text("model");
    if (cli.model->empty()) GPT2_USAGE_FAIL("--model is empty");
  }
  if (given("max-seq-len"))
    cli.max_seq_len = parse_positive_int("max-seq-len", text("max-seq-len"));

  cli.device = text("device");
  if (cli.device != "auto" && cli.device != "cuda" && cli.device != "cpu")
    GPT2_USAGE_FAIL("--device must be auto, cuda or cpu (got '", cli.device, "')");
  model.attention = parse_attention(text("attn"));
  model.flash_kernel = parse_flash_kernel(text("attn-kernel"));
  const std::string deterministic = text("attn-deterministic");
  if (deterministic != "0" && deterministic != "1")
    GPT2_USAGE_FAIL("--attn-deterministic must be 0 or 1 (got '", deterministic, "')");
  model.deterministic_attention = deterministic == "1";
  if (given("precision")) {
    const std::string precision = text("precision");
    if (precision != "fp32" && precision != "bf16" && precision != "fp8")
      GPT2_USAGE_FAIL("--precision must be fp32, bf16 or fp8 (got '", precision, "')");
    cli.precision = precision == "fp8" ? Precision::kFp8 : parse_precision(precision);
  }

  if (given("batch-size")) cli.batch_size = parse_positive_int("batch-size", text("batch-size"));
  if (given("seq-len")) cli.seq_len = parse_positive_int("seq-len", text("seq-len"));
  if (given("total-batch-size")) {
    cli.total_batch_size = parse_integer("total-batch-size", text("total-batch-size"), 1,
                                         std::numeric_limits<int64_t>::max(),
                                         "a positive integer");
  }
}

// The schedule, validation, sampling and the run's files.
void parse_schedule_and_run(const ParsedOptions& o, CommandLine& cli) {
  auto text = [&](const char* name) { return o.text(name); };
  auto given = [&](const char* name) { return o.given(name); };
  TrainConfig& config = cli.config;
  config.steps = parse_positive_int("steps", text("steps"));
  constexpr double kMaxFloat = std::numeric_limits<float>::max();
  LrSchedule& schedule = config.lr_schedule;
  schedule.max_lr = parse_float("lr", text("lr"), 0.0, kMaxFloat, "a non-negative number");
  schedule.warmup_steps = parse_count("warmup-steps", text("warmup-steps"));
  schedule.kind = parse_lr_schedule(text("lr-schedule"));
  schedule.final_lr_frac =
      parse_float("final-lr-frac", text("final-lr-frac"), 0.0, 1.0, "a number in [0, 1]");
  config.weight_decay =
      parse_float("weight-decay", text("weight-decay"), 0.0, kMaxFloat, "a non-negative number");
  config.grad_clip =
      parse_float("grad-clip", text("grad-clip"), 0.0, kMaxFloat, "a non-negative number");

  config.val_every = parse_count("val-every", text("val-every"));
  cli.val_every_given = given("val-every");
  config.val_steps = parse_count("val-steps", text("val-steps"));
  if (config.val_every > 0 && config.val_steps == 0)
    GPT2_USAGE_FAIL("--val-steps must be a positive integer when --val-every is ",
                    config.val_every, " (got '0'; pass --val-every 0 to disable validation)");
  config.sample_every = parse_count("sample-every", text("sample-every"));
  config.sample_tokens = parse_positive_int("sample-tokens", text("sample-tokens"));
  config.out_dir = text("out");
  if (config.out_dir.empty()) GPT2_USAGE_FAIL("--out is empty");
  config.checkpoint_every = parse_count("checkpoint-every", text("checkpoint-every"));
  const std::string save_final = text("save-final");
  if (save_final != "0" && save_final != "1")
    GPT2_USAGE_FAIL("--save-final must be 0 or 1 (got '", save_final, "')");
  config.save_final = save_final == "1";
  config.keep_checkpoints = parse_count("keep-checkpoints", text("keep-checkpoints"));
  config.resume = given("resume");
  config.overwrite = given("overwrite");
  config.on_nonfinite = parse_nonfinite_policy(text("on-nonfinite"));
  // The seed is stored as int64 in the training state, hence the upper bound.
  config.seed = static_cast<uint64_t>(parse_integer("seed", text("seed"), 0,
                                                    std::numeric_limits<int64_t>::max(),
                                                    "a non-negative integer"));
}

// Data and context parallelism, and the CUDA model's knobs.
void parse_parallel_and_kernels(const ParsedOptions& o, CommandLine& cli) {
  auto text = [&](const char* name) { return o.text(name); };
  auto given = [&](const char* name) { return o.given(name); };
  TrainConfig& config = cli.config;
  ModelOptions& model = config.model;
  if (given("zero")) {
    const std::string zero = text("zero");
    if (zero != "0" && zero != "1") GPT2_USAGE_FAIL("--zero must be 0 or 1 (got '", zero, "')");
    cli.zero_stage = zero == "1" ? 1 : 0;
  }
  cli.comm = text("comm");
  if (cli.comm != "auto" && cli.comm != "nccl")
    GPT2_USAGE_FAIL("--comm must be auto or nccl (got '", cli.comm, "')");
  const std::string overlap = text("overlap-comm");
  if (overlap != "0" && overlap != "1" && overlap != "reduce" && overlap != "gather")
    GPT2_USAGE_FAIL("--overlap-comm must be 0, 1, reduce or gather (got '", overlap, "')");
  model.overlap_communication = overlap == "1" || overlap == "reduce";
  model.overlap_gather = overlap == "1" || overlap == "gather";
  config.context_parallel = parse_positive_int("context-parallel", text("context-parallel"));
  if (given("grad-reduce")) {
    const std::string reduce = text("grad-reduce");
    if (reduce != "fp32" && reduce != "bf16")
      GPT2_USAGE_FAIL("--grad-reduce must be fp32 or bf16 (got '", reduce, "')");
    cli.grad_reduce = reduce == "bf16" ? GradReduce::kBf16 : GradReduce::kFp32;
  }
  if (given("grad-bucket")) {
    model.bucket_elements = static_cast<size_t>(parse_integer(
        "grad-bucket", text("grad-bucket"), 1, int64_t{1} << 40, "a positive integer"));
  }
  model.classifier_chunk_rows =
      parse_count("classifier-chunk-rows", text("classifier-chunk-rows"));
  if (given("fp8-classifier")) {
    const std::string value = text("fp8-classifier");
    if (value != "on" && value != "off" && value != "all")
      GPT2_USAGE_FAIL("--fp8-classifier must be on, off or all (got '", value, "')");
    cli.fp8_classifier = value != "off";
    cli.fp8_classifier_weight_gradient = value == "all";
  }
  if (given("fp8-fast-accumulation"))
    cli.fp8_fast_accumulation = o.on_off("fp8-fast-accumulation");
  if (given("fp8-amax-history"))
    cli.fp8_amax_history = static_cast<int>(parse_integer(
        "fp8-amax-history", text("fp8-amax-history"), 1, 16, "an integer from 1 to 16"));
  for (const auto& [name, field] : {std::pair{"fp8-margin", &cli.fp8_margin},
                                    std::pair{"fp8-gradient-margin", &cli.fp8_gradient_margin}})
    if (given(name))
      *field = static_cast<int>(parse_integer(name, text(name), 0, 8, "an integer from 0 to 8"));
  const std::string recompute = text("recompute");
  if (recompute != "none" && recompute != "fc")
    GPT2_USAGE_FAIL("--recompute must be none or fc (got '", recompute, "')");
  model.recompute_fc = recompute == "fc";
  model.cuda_graphs = o.on_off("cuda-graph");
}

}  // namespace

CommandLine parse_command_line(const std::vector<std::string>& args) {
  cxxopts::Options options = make_options();
  options.allow_unrecognised_options();
  const cxxopts::ParseResult result = parse_tool_options(options, args);
  // Unrecognised options are collected rather than thrown so that the message can say
  // "unknown option" in our words; stray positional arguments land here too.
  for (const std::string& extra : result.unmatched()) {
    if (!extra.empty() && extra[0] == '-') GPT2_USAGE_FAIL("unknown option '", extra, "'");
    GPT2_USAGE_FAIL("unexpected argument '", extra, "' (options take the form --name value)");
  }

  CommandLine cli;
  cli.help = result.count("help") > 0;
  if (cli.help) return cli;
  const ParsedOptions parsed{result};
  parse_model_and_shape(parsed, cli);
  parse_schedule_and_run(parsed, cli);
  parse_parallel_and_kernels(parsed, cli);
  return cli;
}

namespace {

// The files a run reads: every shard its patterns match (a pattern that matches nothing is
// left to the loader, which names it) and the model's file or files.
std::vector<CommandPath> run_inputs(const TrainConfig& config) {
  std::vector<CommandPath> inputs;
  for (const auto& [option, pattern] : {std::pair<const char*, const std::string&>{
                                            "--train-data", config.train_data.pattern},
                                        {"--val-data", config.val_data.pattern}}) {
    try {
      for (const std::string& path : expand_glob(pattern)) inputs.push_back({option, path});
    } catch (const Error&) {
    }
  }
  if (config.model_source == ModelSource::kLlmcFile)
    inputs.push_back({"--model", config.model_path});
  if (config.model_source == ModelSource::kHfDirectory) {
    for (const char* file : {kHfConfigFile, kHfWeightsFile})
      inputs.push_back({"--model", (std::filesystem::path(config.model_path) / file).string()});
  }
  return inputs;
}

// A run writes, replaces or removes its files in --out (checkpoints, metrics, summary, run.json):
// an input among them would be overwritten or deleted under the run (--overwrite, pruning).
void refuse_inputs_in_out_dir(const TrainConfig& config) {
  for (const CommandPath& input : run_inputs(config)) {
    const std::filesystem::path path(input.path);
    const std::string folder = path.has_parent_path() ? path.parent_path().string() : ".";
    if (is_run_file_name(path.filename().string()) && same_file(folder, config.out_dir))
      GPT2_USAGE_FAIL(input.option, " ", input.path, " is a file that the run writes or removes "
                      "in --out ", config.out_dir, ": copy it elsewhere, or choose another --out");
  }
}

}  // namespace

namespace {

// --fp8-fast-accumulation with --precision fp8 when not given: on, Transformer Engine's recipe
// for the forward GEMMs (2-3% more tokens/s here). Its 2.1% loss gap at d12 (2000 steps, 25M
// tokens) was the gradients' saturated casts: with the gradients' margin it ends level with
// bf16 (docs/fp8.md, Convergence).
constexpr bool kFp8FastAccumulationDefault = true;

// --device, NCCL and the shape of the job: ranks, context-parallel groups, ZeRO, overlap.
void resolve_device_and_job(const CommandLine& cli, const DeviceAvailability& devices,
                            TrainConfig& config) {
  if (cli.device == "cuda") {
    if (!devices.cuda) GPT2_FAIL("--device cuda: no usable CUDA device: ", devices.why_not);
    config.device = DeviceKind::kCuda;
  } else if (cli.device == "cpu") {
    config.device = DeviceKind::kCpu;
  } else {
    config.device = devices.cuda ? DeviceKind::kCuda : DeviceKind::kCpu;
  }
  const bool on_cuda = config.device == DeviceKind::kCuda;
  if (cli.comm == "nccl" && !on_cuda)
    GPT2_USAGE_FAIL("--comm nccl needs --device cuda (the CPU's ranks communicate through MPI)");
  config.nccl = on_cuda && (config.world_size > 1 || cli.comm == "nccl");
  if (config.nccl && !nccl_backend_available())
    GPT2_FAIL("--device cuda", config.world_size > 1 ? str_cat(" with ", config.world_size,
                                                               " ranks") : std::string(),
              " needs NCCL, and this build has none (CMake found no nccl.h and libnccl beside "
              "the CUDA toolkit); install NCCL and reconfigure, or use --device cpu");
  if (config.world_size % config.context_parallel != 0)
    GPT2_USAGE_FAIL("--context-parallel ", config.context_parallel, " does not divide the job's ",
                    config.world_size, " rank(s): the ranks form groups of that many");
  if (config.context_parallel > 1 && config.model.attention != AttentionKind::kFlash)
    GPT2_USAGE_FAIL("--context-parallel needs --attn flash: naive attention exists to "
                    "materialize each sequence's whole T x T scores, which no rank holds");
  config.model.zero_stage = cli.zero_stage.value_or(config.world_size > 1 ? 1 : 0);
}

// What the model computes with: precision, the gradient sums, attention and its kernel, the
// GPU's memory options.
void resolve_model_options(const CommandLine& cli, TrainConfig& config) {
  const bool on_cuda = config.device == DeviceKind::kCuda;
  config.model.precision = cli.precision.value_or(on_cuda ? Precision::kBf16 : Precision::kFp32);
  if (!on_cuda && config.model.precision != Precision::kFp32)
    GPT2_USAGE_FAIL("--precision ", to_string(config.model.precision),
                    " needs --device cuda (the CPU backend is fp32 only)");
  // bf16 sums halve the bytes of the gradient reduction (bench/results/data_parallel.md); the
  // GPU reduces bf16 gradients as they are, and the CPU rounds its fp32 ones for the same sum.
  config.model.grad_reduce = cli.grad_reduce.value_or(
      bf16_storage(config.model.precision) ? GradReduce::kBf16 : GradReduce::kFp32);
  if (on_cuda && config.model.grad_reduce == GradReduce::kBf16 &&
      !bf16_storage(config.model.precision))
    GPT2_USAGE_FAIL("--grad-reduce bf16 needs --precision bf16 or fp8 on the GPU (an fp32 run "
                    "reduces its fp32 gradients in fp32)");
  if (!on_cuda && config.model.classifier_chunk_rows != 0)
    GPT2_USAGE_FAIL("--classifier-chunk-rows needs --device cuda (the CPU backend holds the "
                    "logits of the whole micro-batch)");
  if (cli.fp8_classifier.value_or(false) && config.model.precision != Precision::kFp8)
    GPT2_USAGE_FAIL("--fp8-classifier ", cli.fp8_classifier_weight_gradient ? "all" : "on",
                    " needs --precision fp8");
  config.model.fp8_classifier =
      cli.fp8_classifier.value_or(config.model.precision == Precision::kFp8);
  config.model.fp8_classifier_weight_gradient = cli.fp8_classifier_weight_gradient;
  if (cli.fp8_fast_accumulation.value_or(false) && config.model.precision != Precision::kFp8)
    GPT2_USAGE_FAIL("--fp8-fast-accumulation on needs --precision fp8");
  config.model.fp8_fast_accumulation =
      cli.fp8_fast_accumulation.value_or(kFp8FastAccumulationDefault &&
                                         config.model.precision == Precision::kFp8);
  if (config.model.precision != Precision::kFp8)
    for (const auto& [name, given_value] :
         {std::pair{"--fp8-amax-history", cli.fp8_amax_history.has_value()},
          std::pair{"--fp8-margin", cli.fp8_margin.has_value()},
          std::pair{"--fp8-gradient-margin", cli.fp8_gradient_margin.has_value()}})
      if (given_value) GPT2_USAGE_FAIL(name, " needs --precision fp8");
  config.model.fp8_amax_history = cli.fp8_amax_history.value_or(config.model.fp8_amax_history);
  config.model.fp8_margin = cli.fp8_margin.value_or(config.model.fp8_margin);
  config.model.fp8_gradient_margin =
      cli.fp8_gradient_margin.value_or(config.model.fp8_gradient_margin);
  if (!on_cuda && config.model.recompute_fc)
    GPT2_USAGE_FAIL("--recompute fc needs --device cuda (the CPU backend keeps every "
                    "activation)");
  const FlashKernelChoice flash_kernel = config.model.flash_kernel;
  if (flash_kernel != FlashKernelChoice::kAuto && config.model.attention != AttentionKind::kFlash)
    GPT2_USAGE_FAIL("--attn-kernel ", to_string(flash_kernel), " chooses among the flash "
                    "kernels; it needs --attn flash");
  if (!on_cuda && flash_kernel != FlashKernelChoice::kAuto)
    GPT2_USAGE_FAIL("--attn-kernel ", to_string(flash_kernel),
                    " needs --device cuda (the CPU backend has one kernel per --attn)");
}

// --model: a preset, an llm.c file or a Hugging Face directory, and its configuration.
void resolve_model_source(const CommandLine& cli, TrainConfig& config) {
  const bool on_cuda = config.device == DeviceKind::kCuda;
  config.model_name = cli.model.value_or(on_cuda ? "d12" : "d2");
  const std::string& name = config.model_name;
  const ModelArgument model = resolve_model_argument(name);
  config.model_source = model.source;
  config.model_path = model.path;
  if (model.source == ModelSource::kHfDirectory) {
    config.model.config = read_hf_model_config(model.path);
  } else if (model.source == ModelSource::kLlmcFile) {
    config.model.config = read_model_checkpoint_config(model.path);
  } else {
    // Throws the "unknown model" usage error for a name that is neither a preset nor a file.
    config.model.config = model_config_from_preset(name, cli.max_seq_len.value_or(1024));
  }
  if (config.model_source != ModelSource::kInit && cli.max_seq_len &&
      *cli.max_seq_len != config.model.config.max_seq_len) {
    GPT2_USAGE_FAIL("--max-seq-len ", *cli.max_seq_len, " disagrees with the ",
                    config.model_source == ModelSource::kLlmcFile ? "checkpoint " : "model ",
                    name, " (max_seq_len ", config.model.config.max_seq_len, "); omit "
                    "--max-seq-len to use the ",
                    config.model_source == ModelSource::kLlmcFile ? "checkpoint's" : "model's");
  }
}

// B, T (against the model's context and the context-parallel chunks) and the total batch.
void resolve_batch(const CommandLine& cli, TrainConfig& config) {
  const bool on_cuda = config.device == DeviceKind::kCuda;
  config.model.batch_size = cli.batch_size.value_or(on_cuda ? 16 : 4);
  config.model.seq_len = cli.seq_len.value_or(on_cuda ? 1024 : 64);
  if (config.model.seq_len > config.model.config.max_seq_len) {
    GPT2_USAGE_FAIL("--seq-len ", config.model.seq_len,
                    " exceeds the model's context (max_seq_len ", config.model.config.max_seq_len,
                    "); raise --max-seq-len or lower --seq-len");
  }

  if (config.context_parallel > 1 && config.model.seq_len < 2 * config.context_parallel)
    GPT2_USAGE_FAIL("--context-parallel ", config.context_parallel, " cuts each sequence into ",
                    2 * config.context_parallel, " chunks: --seq-len must be at least ",
                    2 * config.context_parallel, " (got ", config.model.seq_len, ")");
  if (config.context_parallel > 1 && on_cuda &&
      config.model.seq_len < 2 * config.context_parallel * kContextChunkGranule)
    GPT2_USAGE_FAIL("--context-parallel ", config.context_parallel, " on the GPU needs --seq-len ",
                    ">= ", 2 * config.context_parallel * kContextChunkGranule, " (2N chunks of ",
                    kContextChunkGranule, " positions, the attention kernels' tiles; got ",
                    config.model.seq_len, ")");
  // A context group shares its sequences: the replicas are the groups.
  const int64_t tokens_per_micro_step =
      int64_t{config.model.batch_size} * config.model.seq_len * config.data_parallel_size();
  config.total_batch_size = cli.total_batch_size.value_or(tokens_per_micro_step);
  if (config.total_batch_size % tokens_per_micro_step != 0) {
    GPT2_USAGE_FAIL("--total-batch-size ", config.total_batch_size,
                    " is not a multiple of B*T*",
                    config.context_parallel > 1 ? "replicas" : "world", " = ",
                    config.model.batch_size, "*", config.model.seq_len, "*",
                    config.data_parallel_size(), " = ", tokens_per_micro_step);
  }
  const int64_t accum = config.total_batch_size / tokens_per_micro_step;
  if (accum > std::numeric_limits<int>::max())
    GPT2_USAGE_FAIL("--total-batch-size ", config.total_batch_size, " is too large");
  config.grad_accum_steps = static_cast<int>(accum);
}

// The loaders read B x T windows of tokens below the model's vocabulary; the replicas read
// different windows, the ranks of a context group the same ones.
void shape_loader(const TrainConfig& config, bool shuffle, DataLoaderOptions& loader) {
  loader.batch_size = config.model.batch_size;
  loader.seq_len = config.model.seq_len;
  loader.vocab_size = config.model.config.vocab_size;
  loader.rank = config.data_parallel_rank();
  loader.world_size = config.data_parallel_size();
  loader.shuffle = shuffle;
  loader.seed = config.seed;
}

// The data (the typed patterns or their defaults), validation and the schedule's length.
void resolve_data_and_schedule(const CommandLine& cli, TrainConfig& config) {
  std::string& train_pattern = config.train_data.pattern;
  std::string& val_pattern = config.val_data.pattern;
  // A user's training data is never validated on the embedded corpus: without --val-data such a
  // run does not validate, and says so first thing.
  const bool user_data_without_val = !train_pattern.empty() && val_pattern.empty();
  if (user_data_without_val && cli.val_every_given && config.val_every > 0)
    GPT2_USAGE_FAIL("--val-every ", config.val_every, " needs --val-data when --train-data is "
                    "given (the embedded corpus is no validation set for your data); pass "
                    "--val-data, or --val-every 0");
  if (train_pattern.empty()) {
    train_pattern = default_train_pattern();
    if (val_pattern.empty()) val_pattern = default_val_pattern();
  }
  shape_loader(config, /*shuffle=*/true, config.train_data);
  shape_loader(config, /*shuffle=*/false, config.val_data);
  config.lr_schedule.total_steps = config.steps;
  if (user_data_without_val && config.val_every > 0)
    config.validation_note = "validation: off: --train-data is given without --val-data (the "
                             "embedded corpus is no validation set for your data); pass "
                             "--val-data to validate";
  if (user_data_without_val) config.val_every = 0;
}

}  // namespace

TrainConfig resolve_train_config(CommandLine cli, const DeviceAvailability& devices,
                                 const JobRanks& ranks) {
  TrainConfig config = std::move(cli.config);
  GPT2_CHECK(ranks.world_size >= 1 && ranks.rank >= 0 && ranks.rank < ranks.world_size,
             "rank ", ranks.rank, " of world size ", ranks.world_size);
  config.rank = ranks.rank;
  config.world_size = ranks.world_size;
  resolve_device_and_job(cli, devices, config);
  resolve_model_options(cli, config);
  resolve_model_source(cli, config);
  // --fp8-classifier unset: on with fp8 only where the classifier's FP8 GEMMs fit the model
  // (a padded vocabulary of a multiple of 16; given explicitly, the model plan refuses others).
  if (!cli.fp8_classifier && config.model.config.padded_vocab_size % 16 != 0)
    config.model.fp8_classifier = false;
  resolve_batch(cli, config);
  resolve_data_and_schedule(cli, config);
  refuse_inputs_in_out_dir(config);
  return config;
}

}  // namespace gpt2
