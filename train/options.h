/**
 * @file options.h
 * @brief gpt2-train's command line: parsing (syntax and context-free ranges) and resolution.
 *
 * Two stages, both callable in-process by tests:
 *   parse_command_line()  strings -> CommandLine (a TrainConfig and the options whose
 *                         defaults depend on others). Checks every value that needs no context:
 *                         numbers are numbers, sizes > 0, counts >= 0, names are known,
 *                         --final-lr-frac in [0, 1], --val-steps > 0 when validating.
 *   resolve_train_config() CommandLine + device availability -> TrainConfig. Fills the
 *                         device-dependent defaults (model, precision, B, T), reads the model
 *                         config (preset, checkpoint header, or a Hugging Face directory's
 *                         config.json with its safetensors header) and checks what needs it:
 *                         T <= the model's context, total batch a multiple of B*T*replicas,
 *                         the ZeRO stage (default 1 with several ranks), NCCL for CUDA with
 *                         several ranks, the context-parallel group size (a divisor of the
 *                         world, flash attention, T >= 2N), the gradient sums' type.
 * Validation data: --val-data when given; else, without --train-data, the embedded corpus's
 * validation split; else (a user's --train-data without --val-data) none: the run does not
 * validate and says why on its first line (validation_note), and an explicit --val-every N > 0
 * there is a usage error. The embedded corpus never validates a user's training data.
 * Bad values throw gpt2::UsageError (exit 2) with a one-line message naming the option and
 * the value. `--device cuda` without a usable GPU and unreadable checkpoint files throw
 * gpt2::Error (exit 1): the command line is fine, the machine or the file is not.
 * An input (a shard, the --model file) that is one of the files the run writes or removes in
 * --out is a usage error too.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "inference/model_argument.h"
#include "model/config.h"
#include "model/model.h"
#include "train/lr_schedule.h"

namespace gpt2 {

/// What a step whose loss or gradient norm is not finite does (--on-nonfinite).
enum class NonFinitePolicy {
  kStop,      // stop the run at that step, before its update: exit code 1
  kSkipStep,  // skip that step's update; stop after kMaxConsecutiveSkippedSteps in a row
};
constexpr int kMaxConsecutiveSkippedSteps = 10;

/// --keep-checkpoints default: the newest pair and two to fall back on.
constexpr int kDefaultKeepCheckpoints = 3;

/// Everything a run needs, with every default filled in and every cross-check done. A new field
/// belongs in OUT/config.json too (train/run_record.cpp). The model's and the loaders' options
/// are members, filled once (parse_command_line stores each typed value, resolve_train_config
/// the defaults that depend on others) and read where they are used; the run attaches only its
/// communicators (ModelOptions::comm, context_comm), which exist once it runs.
struct TrainConfig {
  std::string model_name;  // as given/defaulted: preset name, checkpoint path, hf:DIR
  ModelSource model_source = ModelSource::kInit;
  std::string model_path;  // the file (kLlmcFile) or directory (kHfDirectory) read
  DeviceKind device = DeviceKind::kCpu;
  /// Config, B, T, attention and its kernel, precision, the GPU's memory options, ZeRO stage,
  /// the gradient sums and their buckets and overlap.
  ModelOptions model;
  /// The training data (shuffled) and the validation data (pattern empty: none); B, T, the
  /// vocabulary and this rank's replica as the model's.
  DataLoaderOptions train_data;
  DataLoaderOptions val_data;
  int rank = 0;  // data-parallel rank and world size, from the launcher
  int world_size = 1;
  /// --device cuda: the gradients go through NCCL (always with several ranks; at world size 1
  /// with --comm nccl), reduced during the last micro-batch's backward when
  /// model.overlap_communication.
  bool nccl = false;
  /// Ranks that share each sequence (model/context_parallel.h): the job's ranks form groups of
  /// this many consecutive ranks; the groups are the data-parallel replicas.
  int context_parallel = 1;
  int64_t total_batch_size = 0;  // tokens per optimizer step, all ranks
  int grad_accum_steps = 1;      // total_batch_size / (B * T * data_parallel_size())
  int data_parallel_size() const { return world_size / context_parallel; }
  int data_parallel_rank() const { return rank / context_parallel; }
  int steps = 0;
  LrSchedule lr_schedule;
  float weight_decay = 0.0f;
  float grad_clip = 0.0f;  // 0 disables clipping
  int val_every = 0;       // 0 disables
  int val_steps = 0;
  /// Why validation is off although --val-every did not turn it off (printed first by the run,
  /// recorded in config.json); empty otherwise. See resolve_train_config.
  std::string validation_note;
  int sample_every = 0;  // 0 disables
  int sample_tokens = 0;
  std::string out_dir;
  int checkpoint_every = 0;  // 0: no periodic checkpoints
  bool save_final = true;    // the final pair (end of the run, or a signal's stop) regardless
  int keep_checkpoints = 0;  // newest pairs kept; 0 keeps all
  bool resume = false;
  bool overwrite = false;
  NonFinitePolicy on_nonfinite = NonFinitePolicy::kStop;
  uint64_t seed = 0;
};

/// gpt2-train's command line. Each option is stored once: one whose value needs no context
/// straight into `config`, where the run reads it; one whose default depends on the device, the
/// model or other options below, as typed (unset: not typed), for resolve_train_config to
/// resolve into `config`. config.train_data.pattern and config.val_data.pattern hold the typed
/// globs (empty: not given; their defaults depend on each other).
struct CommandLine {
  TrainConfig config;
  std::string device = "auto";       // auto | cuda | cpu
  std::string comm = "auto";         // auto | nccl
  std::optional<std::string> model;  // dN, alias, checkpoint path, hf:DIR or a directory
  std::optional<int> max_seq_len;
  std::optional<Precision> precision;
  std::optional<GradReduce> grad_reduce;
  std::optional<int> batch_size;
  std::optional<int> seq_len;
  std::optional<int64_t> total_batch_size;
  std::optional<int> zero_stage;  // 0 | 1
  std::optional<bool> fp8_classifier;  // unset: on with --precision fp8
  bool fp8_classifier_weight_gradient = false;  // --fp8-classifier all
  std::optional<bool> fp8_fast_accumulation;  // unset: kFp8FastAccumulationDefault with fp8
  std::optional<int> fp8_amax_history;        // unset: ModelOptions' default
  std::optional<int> fp8_margin;              // unset: ModelOptions' default
  std::optional<int> fp8_gradient_margin;     // unset: ModelOptions' default
  bool val_every_given = false;   // --val-every typed (not its default)
  bool help = false;
};

/// args excludes the program name. Throws gpt2::UsageError.
CommandLine parse_command_line(const std::vector<std::string>& args);

/// The --help text.
std::string usage_text();

/// This process's place in its job (from parallel/communicator.h's job communicator).
struct JobRanks {
  int rank = 0;
  int world_size = 1;
};

/// Throws gpt2::UsageError for bad combinations, gpt2::Error for an unusable device or file.
TrainConfig resolve_train_config(CommandLine cli, const DeviceAvailability& devices,
                                 const JobRanks& ranks = {});

/// "naive" | "flash", "auto" | "portable" | "hopper", "stop" | "skip-step"; throw
/// gpt2::UsageError naming the option (--precision's parse_precision is
/// inference/model_argument.h's, the numbers' base/command_line.h's).
AttentionKind parse_attention(const std::string& name);
FlashKernelChoice parse_flash_kernel(const std::string& name);
NonFinitePolicy parse_nonfinite_policy(const std::string& name);
const char* to_string(NonFinitePolicy policy);

}  // namespace gpt2
