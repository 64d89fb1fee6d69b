#include "train/trainer.h"

#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/file_io.h"
#include "base/json.h"
#include "base/rng.h"
#include "base/version.h"
#include "data/dataloader.h"
#include "data/tokenizer.h"
#include "parallel/communicator.h"
#include "parallel/shard_plan.h"
#include "model/checkpoint.h"
#include "model/context_parallel.h"
#include "model/hf_checkpoint.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "model/parameters.h"
#include "train/loss_plot.h"
#include "train/metrics.h"
#include "train/run_files.h"
#include "train/run_record.h"
#include "train/generation.h"
#include "train/signals.h"

namespace gpt2 {
namespace {

using Clock = std::chrono::steady_clock;

// The sampling RNG gets its own stream: seeding it with --seed itself would replay the
// numbers of any other generator seeded the same way.
constexpr uint64_t kSampleStreamSalt = 0x73616d706c696e67ull;  // "sampling"

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// comm: the job's host communicator, or the NCCL one over it (config.nccl); context: the
// rank's context group (nullptr without context parallelism).
ModelOptions model_options(const TrainConfig& config, Communicator& comm,
                           Communicator* context) {
  ModelOptions options;
  options.comm = &comm;
  options.context_comm = context;
  options.zero_stage = config.zero_stage;
  options.overlap_communication = config.overlap_comm;
  options.overlap_gather = config.overlap_gather;
  options.grad_reduce = config.grad_reduce;
  options.bucket_elements = config.bucket_elements;
  options.config = config.model_config;
  options.batch_size = config.batch_size;
  options.seq_len = config.seq_len;
  options.attention = config.attention;
  options.precision = config.precision;
  options.flash_kernel = config.flash_kernel;
  options.deterministic_attention = config.deterministic_attention;
  options.classifier_chunk_rows = config.classifier_chunk_rows;
  options.recompute_fc = config.recompute_fc;
  options.cuda_graphs = config.cuda_graphs;
  return options;
}

DataLoaderOptions loader_options(const TrainConfig& config, const std::string& pattern,
                                 bool shuffle) {
  DataLoaderOptions options;
  options.pattern = pattern;
  options.batch_size = config.batch_size;
  options.seq_len = config.seq_len;
  options.vocab_size = config.model_config.vocab_size;
  // The replicas read different windows; the ranks of a context group the same ones.
  options.rank = config.data_parallel_rank();
  options.world_size = config.data_parallel_size();
  options.shuffle = shuffle;
  options.seed = config.seed;
  return options;
}

// The plan the run prints and reports. On the GPU it is the backend's (device memory). On the
// CPU the measured peak is the whole process's high-water mark, so the plan adds what the
// process holds besides the model's buffers: what is resident before allocation (code,
// libraries, the data and tokenizer read so far, a resume point's copies) and the fp32 copies
// of the parameters that initialization (one) or a checkpoint (parameters, m and v: three)
// makes on the host.
MemoryPlan run_memory_plan(const TrainConfig& config, const ModelOptions& options, bool resuming) {
  MemoryPlan plan = plan_model_memory(options, config.device);
  if (config.device != DeviceKind::kCpu) return plan;
  plan.add("host", "process before allocation (VmRSS: code, data read so far)",
           resident_memory_bytes());
  const size_t param_bytes = ParameterLayout::for_config(config.model_config).total * sizeof(float);
  // A resume point's parameters, m and v are resident already (above); the buffers of later
  // checkpoints reuse that memory once the model holds them.
  const bool saves = config.checkpoint_every > 0 || config.save_final;
  const int copies = resuming ? 0 : saves ? 3 : 1;
  if (copies > 0) {
    plan.add("host", str_cat("staging: ", copies, copies == 1 ? " copy" : " copies",
                             " of the parameters (", copies == 1 ? "initialization" : "checkpoints",
                             ")"),
             copies * param_bytes);
  }
  return plan;
}

void print_data(const char* label, const DataLoader& loader) {
  std::printf("  %-18s %zu file(s), %lld tokens, %lld batches per epoch\n", label,
              loader.files().size(), static_cast<long long>(loader.total_tokens()),
              static_cast<long long>(loader.batches_per_epoch()));
  for (const std::string& file : loader.files()) std::printf("  %-18s   %s\n", "", file.c_str());
}

void print_configuration(const TrainConfig& c, const DataLoader& train, const DataLoader* val,
                         uint64_t run_id, bool resuming) {
  const size_t num_params = ParameterLayout::for_config(c.model_config).total;
  std::printf("gpt2-train configuration\n");
  std::printf("  %-18s %s (%s)\n", "run", format_run_id(run_id).c_str(),
              resuming ? "continued" : "new");
  std::printf("  %-18s %s\n", "device", to_string(c.device));
  std::printf("  %-18s %s%s: %s, %.2fM parameters\n", "model", c.model_name.c_str(),
              c.model_source == ModelSource::kLlmcFile       ? " (checkpoint)"
              : c.model_source == ModelSource::kHfDirectory ? " (Hugging Face)"
                                                              : "",
              c.model_config.describe().c_str(),
              static_cast<double>(num_params) / 1e6);
  std::printf("  %-18s %s", "attention", to_string(c.attention));
  if (c.device == DeviceKind::kCuda && c.attention == AttentionKind::kFlash)
    std::printf(" (kernel %s, %s backward)", to_string(c.flash_kernel),
                c.deterministic_attention ? "deterministic" : "non-deterministic");
  std::printf("\n");
  std::printf("  %-18s %s\n", "precision", to_string(c.precision));
  std::printf("  %-18s B=%d T=%d world=%d\n", "micro-batch", c.batch_size, c.seq_len,
              c.world_size);
  if (c.world_size > 1 || c.nccl) {
    const ShardPlan shards =
        gradient_bucket_plan(c.model_config, c.device, c.bucket_elements, c.world_size, c.rank);
    std::printf("  %-18s %d rank(s) over %s, ZeRO-%d: gradients %s in %s in %zu bucket(s) of "
                "up to %zu elements%s, %s",
                "data parallel", c.world_size, c.nccl ? "NCCL" : "MPI", c.zero_stage,
                c.zero_stage == 1 ? "reduce-scattered" : "all-reduced", to_string(c.grad_reduce),
                shards.buckets().size(), shards.max_bucket_size(),
                c.device == DeviceKind::kCuda ? " (each layer in buckets of its own)" : "",
                c.zero_stage == 1 ? (c.device == DeviceKind::kCuda
                                         ? "AdamW state and master weights sharded, parameters "
                                           "all-gathered"
                                         : "AdamW state sharded, parameters all-gathered")
                                  : "AdamW state on every rank");
    if (c.nccl)
      std::printf(", reductions %s%s", c.overlap_comm ? "overlapped with the last backward"
                                                      : "after the backward",
                  c.zero_stage != 1    ? ""
                  : c.overlap_gather ? ", gathers overlapped with the next forward"
                                     : ", gathers after the update");
    std::printf("\n");
  }
  std::printf("  %-18s %lld tokens = %d grad accumulation step(s) x B*T*%s\n", "total batch",
              static_cast<long long>(c.total_batch_size), c.grad_accum_steps,
              c.context_parallel > 1 ? "replicas" : "world");
  if (c.context_parallel > 1) {
    const ContextShard shard = context_shard(c.seq_len, c.context_parallel, 0);
    std::printf("  %-18s %d rank(s) share each sequence (%d replica(s)): each holds 2 of %d "
                "chunks, up to %d of its %d positions\n",
                "context parallel", c.context_parallel, c.data_parallel_size(),
                2 * c.context_parallel, shard.max_local, c.seq_len);
  }
  std::printf("  %-18s %d\n", "steps", c.steps);
  std::printf("  %-18s %s, max %g, warm-up %d, final fraction %g\n", "lr schedule",
              to_string(c.lr_schedule.kind), c.lr_schedule.max_lr, c.lr_schedule.warmup_steps,
              c.lr_schedule.final_lr_frac);
  std::printf("  %-18s weight decay %g (2-D weights), grad clip %g%s\n", "adamw", c.weight_decay,
              c.grad_clip, c.grad_clip > 0 ? "" : " (off)");
  if (c.val_every > 0) {
    std::printf("  %-18s every %d steps and at the last, %d batches\n", "validation",
                c.val_every, c.val_steps);
  } else if (!c.validation_note.empty()) {
    std::printf("  %-18s off (--train-data without --val-data)\n", "validation");
  } else {
    std::printf("  %-18s off\n", "validation");
  }
  if (c.sample_every > 0) {
    std::printf("  %-18s every %d steps, %d tokens\n", "sampling", c.sample_every,
                c.sample_tokens);
  }
  std::printf("  %-18s %s\n", "out", c.out_dir.c_str());
  if (c.checkpoint_every > 0) {
    std::printf("  %-18s every %d steps and at the last, %s\n", "checkpoints", c.checkpoint_every,
                c.keep_checkpoints > 0 ? str_cat("the newest ", c.keep_checkpoints, " kept").c_str()
                                       : "all kept");
  }
  std::printf("  %-18s %s\n", "non-finite step", to_string(c.on_nonfinite));
  std::printf("  %-18s %llu\n", "seed", static_cast<unsigned long long>(c.seed));
  print_data("train data", train);
  if (val != nullptr) print_data("val data", *val);
  std::fflush(stdout);
}

// A batch as the loader deals it to this rank's replica, (B,T) inputs and targets, and the rows
// the model takes of it: all of them, or (context parallelism) this rank's positions of each.
struct RankBatch {
  RankBatch(int B, int T, std::optional<ContextShard> context)
      : inputs(static_cast<size_t>(B) * T), targets(inputs.size()), shard(std::move(context)),
        batch_size(B) {
    if (shard) {
      shard_inputs.resize(static_cast<size_t>(B) * shard->local_len());
      shard_targets.resize(shard_inputs.size());
    }
  }
  void select_rows() {
    if (!shard) return;
    shard->select(inputs.data(), shard_inputs.data(), batch_size);
    shard->select(targets.data(), shard_targets.data(), batch_size);
  }
  const int* local_inputs() const { return shard ? shard_inputs.data() : inputs.data(); }
  const int* local_targets() const { return shard ? shard_targets.data() : targets.data(); }

  std::vector<int> inputs, targets;  // (B,T)
  std::optional<ContextShard> shard;
  std::vector<int> shard_inputs, shard_targets;  // (B, shard->local_len())
  int batch_size;
};

// Mean loss over the first `batches` validation batches of every rank (each rank its own
// windows), always from the loader's start so that every evaluation sees the same tokens.
float validation_loss(Model& model, DataLoader& loader, int batches, RankBatch& batch,
                      Communicator& comm, int replicas) {
  loader.reset();
  double sum = 0.0;
  for (int i = 0; i < batches; ++i) {
    loader.next_batch(batch.inputs.data(), batch.targets.data());
    batch.select_rows();
    sum += model.evaluate(batch.local_inputs(), batch.local_targets());
  }
  // A context group's ranks each return their share of the mean: the replicas are the groups.
  if (comm.world_size() > 1) sum = sum_in_rank_order(comm, sum);
  return static_cast<float>(sum / (batches * replicas));
}

// A checkpoint is only written when every value in it is finite: a NaN in a saved file would
// poison every run that resumes from it.
void check_finite(const std::vector<float>& values, const char* what, const ModelConfig& config,
                  int step) {
  const auto bad = std::find_if(values.begin(), values.end(),
                                [](float v) { return !std::isfinite(v); });
  if (bad == values.end()) return;
  const auto index = static_cast<size_t>(bad - values.begin());
  const ParameterLayout layout = ParameterLayout::for_config(config);
  int tensor = kNumParamTensors - 1;
  while (tensor > 0 && layout.offsets[tensor] > index) --tensor;
  GPT2_FAIL("step ", step, ": not writing a checkpoint: the ", what, " ",
            ParameterLayout::name(tensor), "[", index - layout.offsets[tensor], "] is ",
            printable(*bad), "; the previous checkpoint is kept");
}

// Where the run stands besides its model, optimizer and data position: what a checkpoint records
// so that a resumed run is the same run and stops where it would have.
struct RunStanding {
  uint64_t run_id = 0;       // rank 0's (the other ranks write nothing)
  int skipped_in_a_row = 0;  // consecutive steps without an update (--on-nonfinite skip-step)
  int skipped_total = 0;     // updates skipped in the run
};

// Rank 0: the pair of step `step` (state completed with its model file's name and hash), then
// the pruning of older pairs.
void write_checkpoint_pair(const TrainConfig& config, int step, const std::vector<float>& params,
                           TrainingState& state) {
  check_finite(params, "parameter", config.model_config, step);
  check_finite(state.adam_m, "AdamW m of", config.model_config, step);
  check_finite(state.adam_v, "AdamW v of", config.model_config, step);
  const std::string model_path = model_checkpoint_path(config.out_dir, step);
  state.model_digest = write_model_checkpoint(model_path, config.model_config, params.data());
  state.model_file = std::filesystem::path(model_path).filename().string();
  const std::string state_path = training_state_path(config.out_dir, step);
  write_training_state(state_path, state);
  std::printf("checkpoint: %s, %s\n", model_path.c_str(), state_path.c_str());
  for (const int64_t old_step : prune_checkpoints(config.out_dir, step, config.keep_checkpoints))
    std::printf("checkpoint: removed the files of step %lld (--keep-checkpoints %d)\n",
                static_cast<long long>(old_step), config.keep_checkpoints);
}

// Collective (the optimizer state of a ZeRO-1 run is gathered from every rank): every rank
// calls it, rank 0 writes the pair. The ranks leave it together, so that the next step's time
// in collectives is not rank 0's write, waited for by the others.
void write_checkpoint(const TrainConfig& config, Model& model, int step,
                      const DataLoader& train_loader, const Rng& sample_rng,
                      const RunStanding& standing, Communicator& comm) {
  const size_t num_params = ParameterLayout::for_config(config.model_config).total;
  std::vector<float> params(num_params);
  model.get_parameters(params.data());

  TrainingState state;
  state.step = step;
  state.num_parameters = static_cast<int64_t>(num_params);
  state.batch_size = config.batch_size;
  state.seq_len = config.seq_len;
  state.total_batch_size = config.total_batch_size;
  state.seed = static_cast<int64_t>(config.seed);
  state.world_size = config.world_size;
  state.context_parallel = config.context_parallel;
  state.loader = train_loader.position();
  state.sample_rng = sample_rng.state();
  state.run_id = standing.run_id;
  state.skipped_in_a_row = standing.skipped_in_a_row;
  state.skipped_total = standing.skipped_total;
  state.settings = training_settings(config);
  state.adam_m.resize(num_params);
  state.adam_v.resize(num_params);
  model.get_optimizer_state(state.adam_m.data(), state.adam_v.data());
  if (config.rank == 0) write_checkpoint_pair(config, step, params, state);
  if (config.world_size > 1) comm.barrier();
}

struct RunTotals {
  ThroughputStats throughput;
  std::vector<double> comm_seconds;  // data parallel: per step, the largest rank's
  std::vector<double> comm_exposed_seconds;  // NCCL: per step, the largest rank's
  size_t peak_mem_bytes = 0;         // data parallel: the largest rank's, at the last step
  std::optional<float> last_loss;
  std::optional<float> last_val_loss;
};

void report_summary(const TrainConfig& config, const Model& model, const MemoryPlan& plan,
                    const RunTotals& totals, const RunStanding& standing) {
  const double tokens_per_s = totals.throughput.mean_tokens_per_s();
  const size_t peak = std::max(model.peak_memory_bytes(), totals.peak_mem_bytes);
  const int world = config.world_size;
  const double flops_per_token = training_flops_per_token(config.model_config, config.seq_len);
  const bool on_cuda = config.device == DeviceKind::kCuda;
  // 0: no known peak for the device (or a CPU run): MFU is not reported.
  const double peak_throughput =
      on_cuda ? peak_flops(model.device_name(), config.precision).value_or(0.0) : 0.0;
  const double mfu = peak_throughput > 0 ? tokens_per_s * flops_per_token / peak_throughput : 0.0;
  const int excluded = totals.throughput.warmup_steps_excluded();

  // The step times after warm-up, and the part of them in collectives (data parallel, NCCL).
  const auto mean_after_warmup_ms = [excluded](const std::vector<double>& seconds) {
    double sum = 0.0;
    int counted = 0;
    for (size_t i = static_cast<size_t>(excluded); i < seconds.size(); ++i, ++counted)
      sum += seconds[i] * 1e3;
    return counted > 0 ? sum / counted : 0.0;
  };
  const bool measured_comm = !totals.comm_seconds.empty();
  const bool measured_exposed = !totals.comm_exposed_seconds.empty();
  const double comm_ms = mean_after_warmup_ms(totals.comm_seconds);
  const double exposed_ms = mean_after_warmup_ms(totals.comm_exposed_seconds);
  const double step_ms = totals.throughput.mean_step_seconds() * 1e3;

  std::printf("summary\n");
  if (world > 1) {
    std::printf("  %-18s %.0f tokens/s for the job of %d ranks, %.0f per rank (mean over %d "
                "step(s); the first %d excluded as warm-up)\n",
                "throughput", tokens_per_s, world, tokens_per_s / world,
                totals.throughput.steps() - excluded, excluded);
    std::printf("  %-18s %s measured per rank, the largest (%s planned per rank)\n",
                "peak memory", format_bytes(peak).c_str(), format_bytes(plan.total()).c_str());
  } else {
    std::printf("  %-18s %.0f tokens/s (mean over %d step(s); the first %d excluded as warm-up)\n",
                "throughput", tokens_per_s, totals.throughput.steps() - excluded, excluded);
    std::printf("  %-18s %s measured (%s planned)\n", "peak memory", format_bytes(peak).c_str(),
                format_bytes(plan.total()).c_str());
  }
  if (measured_comm) {
    std::printf("  %-18s %.1f ms per step in collectives, %.1f%% of the step", "communication",
                comm_ms, step_ms > 0 ? 100.0 * comm_ms / step_ms : 0.0);
    if (measured_exposed)
      std::printf("; %.1f ms of it exposed (the computation waited)", exposed_ms);
    std::printf(world > 1 ? " (the largest rank's)\n" : "\n");
  }
  if (totals.last_loss)
    std::printf("  %-18s %.6f\n", "final train loss", printable(*totals.last_loss));
  if (totals.last_val_loss)
    std::printf("  %-18s %.6f\n", "final val loss", printable(*totals.last_val_loss));
  if (standing.skipped_total > 0)
    std::printf("  %-18s %d (non-finite loss or gradient norm)\n", "skipped updates",
                standing.skipped_total);
  if (peak_throughput > 0) {
    std::printf("  %-18s %.2f%% (%.4g FLOPs/token, %s peak %.1f TFLOP/s)\n", "MFU", 100.0 * mfu,
                flops_per_token, to_string(config.precision), peak_throughput / 1e12);
  } else if (on_cuda) {
    std::printf("  %-18s not reported: no peak throughput known for %s\n", "MFU",
                model.device_name().c_str());
  }
  std::fflush(stdout);

  Json summary;
  summary["run_id"] = format_run_id(standing.run_id);
  summary["version"] = build_version();
  summary["steps"] = totals.throughput.steps();
  summary["warmup_steps_excluded"] = excluded;
  summary["tokens_per_s"] = tokens_per_s;
  summary["world_size"] = world;
  if (world > 1) {
    summary["tokens_per_s_per_rank"] = tokens_per_s / world;
    summary["zero_stage"] = config.zero_stage;
  }
  if (config.nccl) {
    summary["comm_backend"] = "nccl";
    summary["overlap_comm"] = config.overlap_comm;
    summary["overlap_gather"] = config.overlap_gather;
  }
  if (world > 1 || config.nccl) {
    const ShardPlan buckets = gradient_bucket_plan(config.model_config, config.device,
                                                   config.bucket_elements, world, config.rank);
    summary["grad_reduce"] = to_string(config.grad_reduce);
    summary["buckets"] = buckets.buckets().size();
    summary["bucket_max_elements"] = buckets.max_bucket_size();
  }
  if (measured_comm) summary["comm_ms_per_step"] = comm_ms;
  if (measured_exposed) summary["comm_exposed_ms_per_step"] = exposed_ms;
  summary["peak_mem_bytes"] = peak;
  summary["planned_mem_bytes"] = plan.total();
  if (totals.last_loss) summary["final_train_loss"] = json_float(*totals.last_loss);
  if (totals.last_val_loss) summary["final_val_loss"] = json_float(*totals.last_val_loss);
  if (standing.skipped_total > 0) summary["skipped_steps"] = standing.skipped_total;
  summary["flops_per_token"] = flops_per_token;
  if (peak_throughput > 0) {
    summary["mfu"] = mfu;
    summary["peak_flops"] = peak_throughput;
  }
  summary["device"] = to_string(config.device);
  summary["device_name"] = model.device_name();
  summary["model"] = config.model_config.describe();
  summary["attn"] = to_string(config.attention);
  summary["attn_kernel"] = model.attention_kernel();
  summary["precision"] = to_string(config.precision);
  summary["batch_size"] = config.batch_size;
  summary["seq_len"] = config.seq_len;
  summary["total_batch_size"] = config.total_batch_size;
  const std::string json = dump_json(summary) + "\n";
  AtomicFileWriter writer(summary_path(config.out_dir));
  writer.write(json.data(), json.size());
  writer.commit();
}

// Rank 0, before anything is written: what --resume continues, and who this run is.
struct RunStart {
  std::optional<ResumePoint> resume_point;  // --resume found a pair of the run to continue
  uint64_t run_id = 0;                       // that run's, or a new one
  bool remove_earlier_checkpoints = false;   // a new run in an --out of checkpoints (--overwrite)
};

// The resume point is the newest verified pair of the run that last used --out (run.json): a
// pair of another run is never continued. A new run refuses an --out holding checkpoints, whose
// steps its own would interleave with, unless --overwrite; they are removed in claim_out_dir.
RunStart find_run_start(const TrainConfig& config) {
  RunStart start;
  std::error_code ec;
  const bool out_exists = std::filesystem::is_directory(config.out_dir, ec);
  if (config.resume) {
    const std::optional<uint64_t> last_run =
        out_exists ? read_run_record_id(config.out_dir) : std::nullopt;
    ResumeSearch search = find_resume_point(config.out_dir, last_run);
    for (const std::string& note : search.notes) std::printf("resume: %s\n", note.c_str());
    start.resume_point = std::move(search.point);
    if (!start.resume_point && search.rejected > 0) {
      // Starting over would overwrite metrics.jsonl and, step by step, the checkpoints that
      // failed to verify: that is for the user to decide.
      GPT2_FAIL("--resume: none of the ", search.rejected, " checkpoint(s) in ", config.out_dir,
                " verifies (reasons above); not starting over on top of them. Move or delete "
                "them to start from scratch, or use another --out");
    }
    if (start.resume_point) {
      check_resume_compatible(config, *start.resume_point);
      // A version 2 state has no run id: the run continued from it gets one now.
      const uint64_t saved = start.resume_point->state.run_id;
      start.run_id = saved != 0 ? saved : new_run_id();
      return start;
    }
    std::printf("resume: no complete checkpoint%s in %s; starting from scratch\n",
                last_run ? str_cat(" of run ", format_run_id(*last_run)).c_str() : "",
                config.out_dir.c_str());
  }
  start.run_id = new_run_id();
  const std::vector<std::string> states = training_state_files(config.out_dir);
  if (states.empty()) return start;
  if (!config.overwrite) {
    GPT2_FAIL("--out ", config.out_dir, " holds the checkpoints of an earlier run (",
              states.size() == 1 ? states.front()
                                 : str_cat(states.size(), " training states, ", states.front(),
                                           " to ", states.back()),
              "): a new run there would mix its checkpoints with them. --resume continues "
              "that run; --overwrite removes them and starts a new one; or choose another --out");
  }
  start.remove_earlier_checkpoints = true;
  return start;
}

// Rank 0, once the input is checked and --out exists and is locked: --out becomes this run's.
// run.json names it and config.json records its resolved options (rewritten by a resume); a new
// run removes an earlier run's summary and loss plot (and, --overwrite, checkpoints).
void claim_out_dir(const TrainConfig& config, const RunStart& start, const RunDataFiles& files) {
  if (start.remove_earlier_checkpoints) {
    const int removed = remove_checkpoint_files(config.out_dir);
    std::printf("out: removed the %d checkpoint file(s) of the earlier run (--overwrite)\n",
                removed);
  }
  write_run_record(config.out_dir, start.run_id, config);
  write_config_record(config, start.run_id,
                      start.resume_point ? std::optional<int64_t>(start.resume_point->step)
                                         : std::nullopt,
                      files);
  if (!start.resume_point) {
    for (const std::string& earlier : {summary_path(config.out_dir),
                                       loss_plot_path(config.out_dir)})
      if (::unlink(earlier.c_str()) != 0 && errno != ENOENT)
        GPT2_FAIL(earlier, ": cannot remove the earlier run's file: ", std::strerror(errno));
  }
}

// The heading of loss.svg.
std::string loss_plot_title(const TrainConfig& config, uint64_t run_id) {
  return str_cat("gpt2-train run ", format_run_id(run_id), ": ", config.model_name, " ",
                 to_string(config.precision), " on ", to_string(config.device), ", B=",
                 config.batch_size, " T=", config.seq_len, ", ", config.total_batch_size,
                 " tokens per step");
}

}  // namespace

int run_training(const TrainConfig& config) {
  SingleProcessCommunicator single;
  return run_training(config, single);
}

int run_training(const TrainConfig& config, Communicator& comm) {
  GPT2_CHECK(comm.world_size() == config.world_size && comm.rank() == config.rank, "rank ",
             config.rank, " of ", config.world_size, " configured, the communicator has rank ",
             comm.rank(), " of ", comm.world_size());
  // Rank 0 owns --out (lock, metrics, summary, checkpoints) and the resume point; every rank
  // reads its own windows of the data.
  const bool root = config.rank == 0;
  const bool data_parallel = config.world_size > 1;
  // First thing on the screen: a default that changes what the run measures.
  if (root && !config.validation_note.empty()) {
    std::printf("%s\n", config.validation_note.c_str());
    std::fflush(stdout);
  }

  // One run per --out: an existing folder is locked before anything in it is read, a new one
  // right after it is created (two runs racing to create it meet there).
  std::optional<RunDirLock> out_lock;
  if (root && std::filesystem::is_directory(config.out_dir)) {
    out_lock.emplace(config.out_dir);
    for (const std::string& name : remove_stale_temporaries(config.out_dir))
      std::printf("out: removed %s, a temporary file whose writer is no longer running\n",
                  name.c_str());
  }

  // Everything that can reject the input comes next, before --out is written (an existing one
  // only got its lock file and lost its stale temporaries): the tokenizer,
  // the shards (headers here, the first shard's tokens by the prefetch below) and the resume
  // point.
  std::optional<Gpt2Tokenizer> tokenizer;
  if (root && config.sample_every > 0) tokenizer.emplace(Gpt2Tokenizer::from_default_files());
  DataLoader train_loader(loader_options(config, config.train_pattern, /*shuffle=*/true));
  std::unique_ptr<DataLoader> val_loader;
  if (config.val_every > 0)
    val_loader = std::make_unique<DataLoader>(loader_options(config, config.val_pattern, false));

  Rng sample_rng(config.seed ^ kSampleStreamSalt);
  int first_step = 1;
  RunStart run_start;
  if (root) run_start = find_run_start(config);
  std::optional<ResumePoint>& resume_point = run_start.resume_point;
  RunStanding standing;
  standing.run_id = run_start.run_id;
  // Every rank continues from rank 0's resume point: its step, the loader position (the same
  // on every rank: it counts groups of B*world windows) and the skipped updates, on which every
  // rank takes the same decision. The sampling RNG is rank 0's.
  // present, step, epoch, shard, batch cursor, skipped in a row, skipped in all
  int64_t resume_header[7] = {0, 0, 0, 0, 0, 0, 0};
  if (resume_point) {
    const LoaderPosition& position = resume_point->state.loader;
    resume_header[0] = 1;
    resume_header[1] = resume_point->step;
    resume_header[2] = position.epoch;
    resume_header[3] = position.shard_cursor;
    resume_header[4] = position.batch_cursor;
    resume_header[5] = resume_point->state.skipped_in_a_row;
    resume_header[6] = resume_point->state.skipped_total;
  }
  if (data_parallel) comm.broadcast(resume_header, sizeof resume_header, 0);
  const bool resuming = resume_header[0] != 0;
  if (resuming) {
    train_loader.set_position(LoaderPosition{resume_header[2], resume_header[3], resume_header[4]});
    if (resume_point) sample_rng.set_state(resume_point->state.sample_rng);
    first_step = static_cast<int>(resume_header[1]) + 1;
    standing.skipped_in_a_row = static_cast<int>(resume_header[5]);
    standing.skipped_total = static_cast<int>(resume_header[6]);
    if (resume_point)
      std::printf("resume: continuing run %s from %s at step %d\n",
                  format_run_id(standing.run_id).c_str(), resume_point->model_path.c_str(),
                  first_step);
    if (first_step > config.steps) {
      std::printf("resume: the checkpoint is at step %d and --steps is %d: nothing to train\n",
                  first_step - 1, config.steps);
      return 0;
    }
  }

  const size_t batch_tokens = size_t(config.batch_size) * size_t(config.seq_len);
  // --device cuda with several ranks (or --comm nccl): the model's collectives go through NCCL,
  // its id handed out over the job's communicator; this also picks the rank's GPU.
  std::unique_ptr<Communicator> nccl;
  if (config.nccl) nccl = make_nccl_communicator(comm);
  // Context parallelism: the groups of consecutive ranks that share their sequences (of the
  // NCCL communicator on the GPU).
  std::unique_ptr<Communicator> context_group;
  std::optional<ContextShard> shard;
  if (config.context_parallel > 1) {
    context_group = (nccl ? *nccl : comm).split(config.data_parallel_rank(), config.rank);
    shard = context_shard(config.seq_len, config.context_parallel, context_group->rank());
  }
  RankBatch batch(config.batch_size, config.seq_len, shard);
  // The first batch of each loader is read now, so that a bad token in the first shard fails
  // the run before it prints or writes anything; the training loop consumes this batch first.
  train_loader.next_batch(batch.inputs.data(), batch.targets.data());
  bool batch_pending = true;
  int val_batches = 0;
  if (val_loader) {
    std::vector<int> probe_inputs(batch_tokens);
    std::vector<int> probe_targets(batch_tokens);
    val_loader->next_batch(probe_inputs.data(), probe_targets.data());
    val_loader->reset();
    val_batches =
        static_cast<int>(std::min<int64_t>(config.val_steps, val_loader->batches_per_epoch()));
  }

  print_configuration(config, train_loader, val_loader.get(), standing.run_id, resuming);
  if (val_loader && val_batches < config.val_steps) {
    std::printf("validation: %s has %d batch(es) of B=%d T=%d; using %d instead of --val-steps %d\n",
                config.val_pattern.c_str(), val_batches, config.batch_size, config.seq_len,
                val_batches, config.val_steps);
  }

  // The plan is printed before anything is allocated: when it does not fit, the backend's
  // constructor refuses (naming the buffer) right after it, with the plan on the screen.
  const ModelOptions options = model_options(config, nccl ? *nccl : comm, context_group.get());
  const MemoryPlan plan = run_memory_plan(config, options, resuming);
  std::printf("%s\n", plan.to_string(data_parallel ? "memory plan (before allocation, per rank)"
                                                   : "memory plan (before allocation)")
                          .c_str());
  std::fflush(stdout);
  std::unique_ptr<Model> model = config.device == DeviceKind::kCuda ? make_cuda_model(options)
                                                                    : make_cpu_model(options);
  std::printf("device: %s, attention kernel %s\n", model->device_name().c_str(),
              model->attention_kernel().c_str());
  std::fflush(stdout);

  // The starting parameters come from rank 0 (resume point, checkpoint, Hugging Face directory
  // or initialization) and are broadcast, so every replica starts from the same bits; so do
  // the AdamW moments of a resume point, of which each rank keeps what it needs.
  const size_t num_params = ParameterLayout::for_config(config.model_config).total;
  {
    std::vector<float> params;
    if (resume_point) {
      params.swap(resume_point->model.params);
    } else if (!root) {
      params.resize(num_params);  // filled by the broadcast
    } else if (config.model_source == ModelSource::kLlmcFile) {
      ModelCheckpoint checkpoint = read_model_checkpoint(config.model_path);
      GPT2_CHECK(checkpoint.params.size() == num_params);
      params.swap(checkpoint.params);
    } else if (config.model_source == ModelSource::kHfDirectory) {
      HfModel hf = read_hf_model(config.model_path);
      if (hf.config != config.model_config)
        GPT2_FAIL(config.model_path, ": the model changed while the run started (now ",
                  hf.config.describe(), ")");
      params.swap(hf.params);
    } else {
      params.resize(num_params);
      init_parameters(params.data(), config.model_config, config.seed);
    }
    if (data_parallel) {
      params.resize(num_params);
      comm.broadcast(params.data(), num_params * sizeof(float), 0);
    }
    model->set_parameters(params.data());
  }
  if (resuming) {
    // The model holds them now; the host copies go when this scope ends.
    std::vector<float> m, v;
    if (resume_point) {
      m.swap(resume_point->state.adam_m);
      v.swap(resume_point->state.adam_v);
    }
    if (data_parallel) {
      m.resize(num_params);
      v.resize(num_params);
      comm.broadcast(m.data(), num_params * sizeof(float), 0);
      comm.broadcast(v.data(), num_params * sizeof(float), 0);
    }
    model->set_optimizer_state(m.data(), v.data());
  }

  std::optional<MetricsFile> metrics;
  if (root) {
    make_directories(config.out_dir);
    if (!out_lock) out_lock.emplace(config.out_dir);
    RunDataFiles data_files;
    data_files.train = train_loader.files();
    if (val_loader) data_files.val = val_loader->files();
    claim_out_dir(config, run_start, data_files);
    const std::string metrics_file = metrics_path(config.out_dir);
    if (resume_point) {
      truncate_metrics(metrics_file, resume_point->step);
    } else {
      AtomicFileWriter fresh(metrics_file);  // an earlier run's lines must not survive
      fresh.commit();
    }
    metrics.emplace(metrics_file);
  }

  const int64_t tokens_per_step = config.total_batch_size;  // all ranks
  // Each replica's gradient is of its own micro-batches' mean loss (a context group's ranks each
  // of their share of it); the sum over the ranks (reduce_gradients) is then the gradient of
  // the global batch's mean loss.
  const int micro_batches_per_step = config.grad_accum_steps * config.data_parallel_size();
  const float loss_scale = 1.0f / static_cast<float>(micro_batches_per_step);
  RunTotals totals;
  const StopSignals stop_signals;  // from here on SIGTERM/SIGINT stop the run between steps
  // The ranks start step 1 together: rank 0's setup of --out is not the others' time in
  // collectives (so is a checkpoint's write, write_checkpoint).
  if (data_parallel) comm.barrier();

  for (int step = first_step; step <= config.steps; ++step) {
    const Clock::time_point start = Clock::now();
    const double comm_start = comm.stats().seconds;
    model->zero_grad();
    for (int micro = 0; micro < config.grad_accum_steps; ++micro) {
      if (!batch_pending) train_loader.next_batch(batch.inputs.data(), batch.targets.data());
      batch.select_rows();
      batch_pending = false;
      if (micro + 1 == config.grad_accum_steps) model->expect_last_micro_batch();
      model->queue_forward_backward(batch.local_inputs(), batch.local_targets(), loss_scale);
    }
    model->reduce_gradients();
    AdamWHyper hyper;
    hyper.lr = config.lr_schedule.at(step - 1);
    hyper.weight_decay = config.weight_decay;
    // A non-finite loss or norm is never applied (model.h); stop ends the run below, after the
    // step's metrics line. The decision is the same on every rank.
    const Model::StepOutcome outcome =
        model->finish_step(hyper, step, config.grad_clip, micro_batches_per_step);
    const float loss = outcome.loss;
    const float norm = outcome.grad_norm;
    const bool finite = outcome.applied;
    if (finite) {
      standing.skipped_in_a_row = 0;
    } else {
      ++standing.skipped_in_a_row;
      ++standing.skipped_total;
    }
    const double seconds = seconds_since(start);
    // NCCL: the GPU time of the collectives, measured by the model; MPI: the wall time in them.
    const std::optional<Model::CommunicationTime> device_comm = model->last_step_communication();
    const double comm_seconds =
        device_comm ? device_comm->collective_ms * 1e-3 : comm.stats().seconds - comm_start;
    totals.throughput.add_step(seconds, tokens_per_step);

    StepMetrics metrics_row;
    metrics_row.step = step;
    metrics_row.loss = loss;
    metrics_row.lr = hyper.lr;
    metrics_row.grad_norm = norm;
    metrics_row.ms = seconds * 1e3;
    metrics_row.tokens_per_s = seconds > 0.0 ? static_cast<double>(tokens_per_step) / seconds : 0.0;
    metrics_row.attn = to_string(config.attention);
    metrics_row.device = to_string(config.device);
    metrics_row.precision = to_string(config.precision);
    metrics_row.micro_batches = config.grad_accum_steps;
    metrics_row.skipped = !finite;
    metrics_row.world_size = config.world_size;
    totals.last_loss = loss;

    const bool last_step = step == config.steps;
    const bool stopping = !finite && (config.on_nonfinite == NonFinitePolicy::kStop ||
                                      standing.skipped_in_a_row >= kMaxConsecutiveSkippedSteps);
    const bool validating =
        val_loader && !stopping && (step % config.val_every == 0 || last_step);
    const bool sampling = config.sample_every > 0 && !stopping && step % config.sample_every == 0;
    // ZeRO-1 leaves the other ranks' shards to the next forward: whole before reading them.
    if (validating || sampling) model->synchronize_parameters();
    if (validating) {
      metrics_row.val_loss =
          validation_loss(*model, *val_loader, val_batches, batch, comm,
                          config.data_parallel_size());
      totals.last_val_loss = metrics_row.val_loss;
    }
    metrics_row.peak_mem_bytes = model->peak_memory_bytes();
    // Data parallel: the ranks agree on whether a signal asks them to stop (each may have
    // received it between other steps; all must stop after the same one), and the line shows
    // the largest rank's memory and time in collectives.
    int agreed_signal = 0;
    const double exposed_seconds = device_comm ? device_comm->exposed_ms * 1e-3 : 0.0;
    if (data_parallel) {
      double shared[4] = {static_cast<double>(StopSignals::received()),
                          static_cast<double>(metrics_row.peak_mem_bytes), comm_seconds,
                          exposed_seconds};
      comm.all_reduce(shared, 4, ReduceOp::kMax);
      agreed_signal = static_cast<int>(shared[0]);
      metrics_row.peak_mem_bytes = static_cast<size_t>(shared[1]);
      metrics_row.comm_ms = shared[2] * 1e3;
      totals.comm_seconds.push_back(shared[2]);
      if (device_comm) {
        metrics_row.comm_exposed_ms = shared[3] * 1e3;
        totals.comm_exposed_seconds.push_back(shared[3]);
      }
      totals.peak_mem_bytes = metrics_row.peak_mem_bytes;
    } else if (device_comm) {  // NCCL at world size 1
      metrics_row.comm_ms = comm_seconds * 1e3;
      metrics_row.comm_exposed_ms = exposed_seconds * 1e3;
      totals.comm_seconds.push_back(comm_seconds);
      totals.comm_exposed_seconds.push_back(exposed_seconds);
    }

    const double eta = totals.throughput.mean_step_seconds() * (config.steps - step);
    std::printf("%s\n", format_step_line(metrics_row, config.steps, eta).c_str());
    if (root && sampling) {
      const std::vector<int> sample =
          generate_training_sample(*model, config.sample_tokens, sample_rng);
      std::printf("sample at step %d:\n%s\n---\n", step, tokenizer->decode(sample).c_str());
    }
    std::fflush(stdout);

    if (metrics) metrics->append_line(to_json_line(metrics_row), step);
    // The curves after every validation; the run's end and a signal's stop draw them below.
    const std::string metrics_file = metrics_path(config.out_dir);
    const std::string plot_title = loss_plot_title(config, standing.run_id);
    if (metrics && validating && !last_step)
      write_loss_plot(config.out_dir, metrics_file, config.steps, plot_title);

    if (stopping) {
      const std::string what = str_cat("the loss is ", printable(loss),
                                       " and the gradient norm is ", printable(norm));
      if (config.on_nonfinite == NonFinitePolicy::kStop)
        GPT2_FAIL("step ", step, ": ", what, ": the run diverged and stops here (--on-nonfinite ",
                  "stop); the update of step ", step, " was not applied and no checkpoint holds ",
                  "it. Lower --lr, or pass --on-nonfinite skip-step to skip such steps");
      GPT2_FAIL("step ", step, ": ", what, ": ", standing.skipped_in_a_row,
                " steps in a row had their ",
                "update skipped (--on-nonfinite skip-step): the run diverged and stops here. ",
                "Lower --lr");
    }
    // Periodic pairs, and the final one (the run's end, or a signal's stop below) unless
    // --save-final 0 with no periodic ones: a run leaves its weights behind.
    const bool checkpointing = config.checkpoint_every > 0;
    const bool saving_final = checkpointing || config.save_final;
    const bool checkpoint_step = (checkpointing && step % config.checkpoint_every == 0) ||
                                 (saving_final && last_step);
    if (checkpoint_step)
      write_checkpoint(config, *model, step, train_loader, sample_rng, standing, comm);

    const int signal_number = data_parallel ? agreed_signal : StopSignals::received();
    if (signal_number != 0) {
      if (saving_final && !checkpoint_step)
        write_checkpoint(config, *model, step, train_loader, sample_rng, standing, comm);
      if (last_step && root) report_summary(config, *model, plan, totals, standing);
      if (metrics && (saving_final || last_step))
        write_loss_plot(config.out_dir, metrics_file, config.steps, plot_title);
      if (saving_final) {
        std::printf("stopped by %s after step %d of %d: saved %s and %s; --resume continues "
                    "from there\n",
                    signal_name(signal_number), step, config.steps,
                    model_checkpoint_path(config.out_dir, step).c_str(),
                    training_state_path(config.out_dir, step).c_str());
      } else {
        std::printf("stopped by %s after step %d of %d: no checkpoint saved (--save-final 0 "
                    "and --checkpoint-every 0)\n",
                    signal_name(signal_number), step, config.steps);
      }
      std::fflush(stdout);
      return 128 + signal_number;
    }
  }
  if (root) {
    report_summary(config, *model, plan, totals, standing);
    write_loss_plot(config.out_dir, metrics_path(config.out_dir), config.steps,
                    loss_plot_title(config, standing.run_id));
    std::printf("out: loss curves in %s, the run's configuration in %s\n",
                loss_plot_path(config.out_dir).c_str(),
                config_record_path(config.out_dir).c_str());
  }
  return 0;
}

namespace {

// Ranks other than 0 print nothing on stdout (rank 0 speaks for the job); their stderr stays,
// so a rank that fails says why.
void quiet_unless_root(const Communicator& comm) {
  if (comm.rank() == 0) return;
  std::fflush(stdout);
  const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null_fd < 0) return;
  ::dup2(null_fd, STDOUT_FILENO);
  ::close(null_fd);
}

// Ranks on one node share its cores: unless OMP_NUM_THREADS says otherwise, a rank that the
// launcher bound to some of the cores uses those, and an unbound one its share of them all.
void share_cores(const Communicator& comm) {
  if (std::getenv("OMP_NUM_THREADS") != nullptr || comm.local_size() <= 1) return;
  const int available = omp_get_num_procs();  // the cores this process may run on
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int threads =
      available < online ? available : std::max(1, available / comm.local_size());
  omp_set_num_threads(threads);
}

}  // namespace

int train_main(int argc, char** argv) {
  // A write past the file size limit (ulimit -f) then fails with EFBIG and is reported like
  // a full disk, instead of SIGXFSZ killing the process without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  std::unique_ptr<Communicator> comm;
  int exit_code = 0;
  std::string failure;
  try {
    // A plain run gets the single-process communicator (no MPI call); a rank of a job started
    // by mpirun or srun the MPI one.
    comm = make_job_communicator();
    if (comm->world_size() > 1) {
      quiet_unless_root(*comm);
      share_cores(*comm);
    }
    std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
    const CommandLine cli = parse_command_line(args);
    if (cli.help) {
      std::printf("%s", usage_text().c_str());
      return 0;
    }
    // Probing initializes the CUDA runtime: not worth it when the CPU is asked for by name.
    if (comm->local_size() > 1 && cli.device != "cpu") select_gpu_of_local_rank(comm->local_rank());
    const DeviceAvailability devices = cli.device == "cpu" ? DeviceAvailability{} : probe_devices();
    const JobRanks ranks{comm->rank(), comm->world_size()};
    return run_training(resolve_train_config(cli, devices, ranks), *comm);
  } catch (const UsageError& e) {
    exit_code = 2;
    failure = e.what();
  } catch (const std::exception& e) {
    exit_code = 1;
    failure = e.what();
  }
  std::fflush(stdout);
  if (comm == nullptr || comm->world_size() == 1) {
    std::fprintf(stderr, "gpt2-train: error: %s\n", failure.c_str());
    return exit_code;
  }
  // The other ranks may be waiting for this one in a collective: the job ends here, all of it.
  std::fprintf(stderr, "gpt2-train: rank %d of %d: error: %s\n", comm->rank(),
               comm->world_size(), failure.c_str());
  comm->abort(exit_code);
  return exit_code;  // not reached (abort does not return; GCC does not see through the call)
}

}  // namespace gpt2
