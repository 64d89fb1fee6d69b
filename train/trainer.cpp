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
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/file_io.h"
#include "base/json.h"
#include "base/rng.h"
#include "base/version.h"
#include "data/dataloader.h"
#include "data/tokenizer.h"
#include "inference/generation.h"
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
#include "train/run_memory.h"
#include "train/run_report.h"
#include "train/run_record.h"
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

// The heading of loss.svg.
std::string loss_plot_title(const TrainConfig& config, uint64_t run_id) {
  return str_cat("gpt2-train run ", format_run_id(run_id), ": ", config.model_name, " ",
                 to_string(config.model.precision), " on ", to_string(config.device), ", B=",
                 config.model.batch_size, " T=", config.model.seq_len, ", ",
                 config.total_batch_size, " tokens per step");
}

// Rank 0's starting parameters when no resume point gives them: the --model file, the
// Hugging Face directory, or GPT-2's initialization from --seed.
std::vector<float> starting_parameters(const TrainConfig& config) {
  const size_t num_params = ParameterLayout::for_config(config.model.config).total;
  if (config.model_source == ModelSource::kLlmcFile) {
    ModelCheckpoint checkpoint = read_model_checkpoint(config.model_path);
    GPT2_CHECK(checkpoint.params.size() == num_params);
    return std::move(checkpoint.params);
  }
  if (config.model_source == ModelSource::kHfDirectory) {
    HfModel hf = read_hf_model(config.model_path);
    if (hf.config != config.model.config)
      GPT2_FAIL(config.model_path, ": the model changed while the run started (now ",
                hf.config.describe(), ")");
    return std::move(hf.params);
  }
  std::vector<float> params(num_params);
  init_parameters(params.data(), config.model.config, config.seed);
  return params;
}

// One run of gpt2-train, in the order of trainer.h's file comment: open() (the lock of --out,
// the inputs, the resume point), build_model() (communicators, first batches, the printed
// configuration and plan, the model and its starting parameters), claim_out() (--out becomes
// this run's), then per step train_step() and report_step() (metrics, validation, sampling,
// checkpoints, signals), and finish().
class TrainingRun {
 public:
  TrainingRun(const TrainConfig& config, Communicator& comm)
      : config_(config), comm_(comm), root_(config.rank == 0),
        data_parallel_(config.world_size > 1),
        sample_rng_(config.seed ^ kSampleStreamSalt) {}

  int run() {
    if (!open()) return 0;
    build_model();
    claim_out();
    // From here on SIGTERM/SIGINT stop the run between steps.
    stop_signals_.emplace();
    // The ranks start step 1 together: rank 0's setup of --out is not the others' time in
    // collectives (so is a checkpoint's write, write_checkpoint).
    if (data_parallel_) comm_.barrier();
    for (int step = first_step_; step <= config_.steps; ++step) {
      const StepResult result = train_step(step);
      if (const std::optional<int> exit_code = report_step(step, result)) return *exit_code;
    }
    finish();
    return 0;
  }

 private:
  // What one step measured and decided.
  struct StepResult {
    Model::StepOutcome outcome;
    float lr = 0.0f;
    double seconds = 0.0;
    double comm_seconds = 0.0;  // NCCL: the GPU time of the collectives; MPI: the wall time
    std::optional<Model::CommunicationTime> device_comm;
  };

  // Everything that can reject the input, before --out is written (an existing one only gets
  // its lock file and loses its stale temporaries). Returns false when a resume point is at or
  // past --steps: nothing to train.
  bool open() {
    // First thing on the screen: a default that changes what the run measures.
    if (root_ && !config_.validation_note.empty()) {
      std::printf("%s\n", config_.validation_note.c_str());
      std::fflush(stdout);
    }
    // One run per --out: an existing folder is locked before anything in it is read, a new one
    // right after it is created (two runs racing to create it meet there).
    if (root_ && std::filesystem::is_directory(config_.out_dir)) {
      out_lock_.emplace(config_.out_dir);
      for (const std::string& name : remove_stale_temporaries(config_.out_dir))
        std::printf("out: removed %s, a temporary file whose writer is no longer running\n",
                    name.c_str());
    }
    // The tokenizer, the shards (headers here, the first shard's tokens in build_model) and
    // the resume point.
    if (root_ && config_.sample_every > 0)
      tokenizer_.emplace(Gpt2Tokenizer::from_default_files());
    train_loader_ = std::make_unique<DataLoader>(config_.train_data);
    if (config_.val_every > 0) val_loader_ = std::make_unique<DataLoader>(config_.val_data);
    if (root_) run_start_ = find_run_start(config_);
    standing_.run_id = run_start_.run_id;
    return restore_position();
  }

  // Every rank continues from rank 0's resume point: its step, the loader position (the same
  // on every rank: it counts groups of B*world windows) and the skipped updates, on which every
  // rank takes the same decision. The sampling RNG is rank 0's.
  bool restore_position() {
    const std::optional<ResumePoint>& resume_point = run_start_.resume_point;
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
    if (data_parallel_) comm_.broadcast(resume_header, sizeof resume_header, 0);
    resuming_ = resume_header[0] != 0;
    if (!resuming_) return true;
    train_loader_->set_position(
        LoaderPosition{resume_header[2], resume_header[3], resume_header[4]});
    if (resume_point) sample_rng_.set_state(resume_point->state.sample_rng);
    first_step_ = static_cast<int>(resume_header[1]) + 1;
    standing_.skipped_in_a_row = static_cast<int>(resume_header[5]);
    standing_.skipped_total = static_cast<int>(resume_header[6]);
    if (resume_point)
      std::printf("resume: continuing run %s from %s at step %d\n",
                  format_run_id(standing_.run_id).c_str(), resume_point->model_path.c_str(),
                  first_step_);
    if (first_step_ > config_.steps) {
      std::printf("resume: the checkpoint is at step %d and --steps is %d: nothing to train\n",
                  first_step_ - 1, config_.steps);
      return false;
    }
    return true;
  }

  // The model's communicators, the first batches (which validate the first shards' tokens
  // before anything is printed or written), the configuration and the plan on the screen, then
  // the model and its starting parameters.
  void build_model() {
    // --device cuda with several ranks (or --comm nccl): the model's collectives go through
    // NCCL, its id handed out over the job's communicator; this also picks the rank's GPU.
    if (config_.nccl) nccl_ = make_nccl_communicator(comm_);
    // Context parallelism: the groups of consecutive ranks that share their sequences (of the
    // NCCL communicator on the GPU).
    std::optional<ContextShard> shard;
    if (config_.context_parallel > 1) {
      context_group_ = model_comm().split(config_.data_parallel_rank(), config_.rank);
      shard = context_shard(config_.model.seq_len, config_.context_parallel,
                            context_group_->rank());
    }
    read_first_batches(shard);

    print_configuration(config_, *train_loader_, val_loader_.get(), standing_.run_id,
                        resuming_);
    if (val_loader_ && val_batches_ < config_.val_steps) {
      std::printf("validation: %s has %d batch(es) of B=%d T=%d; using %d instead of "
                  "--val-steps %d\n",
                  config_.val_data.pattern.c_str(), val_batches_, config_.model.batch_size,
                  config_.model.seq_len, val_batches_, config_.val_steps);
    }

    // The plan is printed before anything is allocated: when it does not fit, the backend's
    // constructor refuses (naming the buffer) right after it, with the plan on the screen.
    ModelOptions options = config_.model;
    options.comm = &model_comm();
    options.context_comm = context_group_.get();
    size_t resident = 0;
    plan_ = run_memory_plan(config_, options, resuming_, &resident);
    std::printf("%s\n",
                plan_.to_string(data_parallel_ ? "memory plan (before allocation, per rank)"
                                               : "memory plan (before allocation)")
                    .c_str());
    std::fflush(stdout);
    if (config_.device == DeviceKind::kCpu) check_host_plan_fits(plan_, resident);
    model_ = config_.device == DeviceKind::kCuda ? make_cuda_model(options)
                                                 : make_cpu_model(options);
    std::printf("device: %s, attention kernel %s\n", model_->device_name().c_str(),
                model_->attention_kernel().c_str());
    std::fflush(stdout);
    load_parameters();
  }

  // The job's host communicator, or the NCCL one over it.
  Communicator& model_comm() { return nccl_ ? *nccl_ : comm_; }

  // The training loop consumes the first training batch first; the validation loader is reset.
  void read_first_batches(const std::optional<ContextShard>& shard) {
    batch_ = std::make_unique<RankBatch>(config_.model.batch_size, config_.model.seq_len, shard);
    train_loader_->next_batch(batch_->inputs.data(), batch_->targets.data());
    batch_pending_ = true;
    if (!val_loader_) return;
    const size_t batch_tokens =
        size_t(config_.model.batch_size) * size_t(config_.model.seq_len);
    std::vector<int> probe_inputs(batch_tokens);
    std::vector<int> probe_targets(batch_tokens);
    val_loader_->next_batch(probe_inputs.data(), probe_targets.data());
    val_loader_->reset();
    val_batches_ =
        static_cast<int>(std::min<int64_t>(config_.val_steps, val_loader_->batches_per_epoch()));
  }

  // The starting parameters come from rank 0 (resume point, checkpoint, Hugging Face directory
  // or initialization) and are broadcast, so every replica starts from the same bits; so do
  // the AdamW moments of a resume point, of which each rank keeps what it needs.
  void load_parameters() {
    std::optional<ResumePoint>& resume_point = run_start_.resume_point;
    const size_t num_params = ParameterLayout::for_config(config_.model.config).total;
    {
      std::vector<float> params;
      if (resume_point) {
        params.swap(resume_point->model.params);
      } else if (!root_) {
        params.resize(num_params);  // filled by the broadcast
      } else {
        params = starting_parameters(config_);
      }
      if (data_parallel_) {
        params.resize(num_params);
        comm_.broadcast(params.data(), num_params * sizeof(float), 0);
      }
      model_->set_parameters(params.data());
    }
    if (!resuming_) return;
    // The model holds them now; the host copies go when this scope ends.
    std::vector<float> m, v;
    if (resume_point) {
      m.swap(resume_point->state.adam_m);
      v.swap(resume_point->state.adam_v);
    }
    if (data_parallel_) {
      m.resize(num_params);
      v.resize(num_params);
      comm_.broadcast(m.data(), num_params * sizeof(float), 0);
      comm_.broadcast(v.data(), num_params * sizeof(float), 0);
    }
    model_->set_optimizer_state(m.data(), v.data());
    // --precision fp8's scales (none from a run of another precision or a version 3 state).
    std::vector<uint8_t> precision;
    if (resume_point) precision.swap(resume_point->state.precision_state);
    const bool kept = model_->set_precision_state(precision);
    if (root_ && kept && precision.empty())
      std::printf("note: the training state holds no FP8 scales (a run of another precision, "
                  "or written before they were kept): the delayed scales start afresh\n");
    if (root_ && !kept && !precision.empty())
      std::printf("note: the training state's FP8 scales are not used by --precision %s\n",
                  to_string(config_.model.precision));
  }

  // Rank 0: --out created and locked if new, made this run's, and its metrics.jsonl opened
  // (cut back to the resume point's step, or emptied).
  void claim_out() {
    if (!root_) return;
    make_directories(config_.out_dir);
    if (!out_lock_) out_lock_.emplace(config_.out_dir);
    RunDataFiles data_files;
    data_files.train = train_loader_->files();
    if (val_loader_) data_files.val = val_loader_->files();
    claim_out_dir(config_, run_start_, data_files);
    const std::string metrics_file = metrics_path(config_.out_dir);
    if (run_start_.resume_point) {
      truncate_metrics(metrics_file, run_start_.resume_point->step);
    } else {
      AtomicFileWriter fresh(metrics_file);  // an earlier run's lines must not survive
      fresh.commit();
    }
    metrics_.emplace(metrics_file);
  }

  // ---- The step ------------------------------------------------------------------------------
  // grad_accum_steps micro-batches, the gradients summed over the ranks, then clipping and
  // AdamW, skipped when the loss or the norm is not finite (model.h's finish_step).
  StepResult train_step(int step) {
    const Clock::time_point start = Clock::now();
    const double comm_start = comm_.stats().seconds;
    model_->zero_grad();
    for (int micro = 0; micro < config_.grad_accum_steps; ++micro) {
      if (!batch_pending_)
        train_loader_->next_batch(batch_->inputs.data(), batch_->targets.data());
      batch_->select_rows();
      batch_pending_ = false;
      if (micro + 1 == config_.grad_accum_steps) model_->expect_last_micro_batch();
      model_->queue_forward_backward(batch_->local_inputs(), batch_->local_targets(),
                                     loss_scale());
    }
    model_->reduce_gradients();
    AdamWHyper hyper;
    hyper.lr = config_.lr_schedule.at(step - 1);
    hyper.weight_decay = config_.weight_decay;
    StepResult result;
    result.lr = hyper.lr;
    result.outcome = model_->finish_step(hyper, step, config_.grad_clip, micro_batches_per_step());
    if (result.outcome.applied) {
      standing_.skipped_in_a_row = 0;
    } else {
      ++standing_.skipped_in_a_row;
      ++standing_.skipped_total;
    }
    result.seconds = seconds_since(start);
    result.device_comm = model_->last_step_communication();
    result.comm_seconds = result.device_comm ? result.device_comm->collective_ms * 1e-3
                                             : comm_.stats().seconds - comm_start;
    totals_.throughput.add_step(result.seconds, config_.total_batch_size);
    return result;
  }

  // Each replica's gradient is of its own micro-batches' mean loss (a context group's ranks
  // each of their share of it); the sum over the ranks (reduce_gradients) is then the gradient
  // of the global batch's mean loss.
  int micro_batches_per_step() const {
    return config_.grad_accum_steps * config_.data_parallel_size();
  }
  float loss_scale() const { return 1.0f / static_cast<float>(micro_batches_per_step()); }

  // ---- Diagnostics ---------------------------------------------------------------------------
  // After a step: validation, sampling, the metrics line, loss.svg, a diverged run's stop, the
  // checkpoint and a signal's stop, in that order. Returns the exit code when the run stops.
  std::optional<int> report_step(int step, const StepResult& result) {
    StepMetrics row = metrics_row(step, result);
    const bool last_step = step == config_.steps;
    // A non-finite loss or norm is never applied (model.h); stop ends the run below, after the
    // step's metrics line. The decision is the same on every rank.
    const bool stopping =
        !result.outcome.applied &&
        (config_.on_nonfinite == NonFinitePolicy::kStop ||
         standing_.skipped_in_a_row >= kMaxConsecutiveSkippedSteps);
    const bool validating =
        val_loader_ && !stopping && (step % config_.val_every == 0 || last_step);
    const bool sampling =
        config_.sample_every > 0 && !stopping && step % config_.sample_every == 0;
    // ZeRO-1 leaves the other ranks' shards to the next forward: whole before reading them.
    if (validating || sampling) model_->synchronize_parameters();
    if (validating) {
      row.val_loss = validation_loss(*model_, *val_loader_, val_batches_, *batch_, comm_,
                                     config_.data_parallel_size());
      totals_.last_val_loss = row.val_loss;
    }
    row.peak_mem_bytes = model_->peak_memory_bytes();
    const int agreed_signal = agree_across_ranks(result, row);

    const double eta = totals_.throughput.mean_step_seconds() * (config_.steps - step);
    std::printf("%s\n", format_step_line(row, config_.steps, eta).c_str());
    if (root_ && sampling) {
      const std::vector<int> sample =
          generate_training_sample(*model_, config_.sample_tokens, sample_rng_);
      std::printf("sample at step %d:\n%s\n---\n", step, tokenizer_->decode(sample).c_str());
    }
    std::fflush(stdout);

    if (metrics_) metrics_->append_line(to_json_line(row), step);
    // The curves after every validation; the run's end and a signal's stop draw them below.
    if (metrics_ && validating && !last_step) write_plot();
    if (stopping) stop_diverged(step, result.outcome);
    return checkpoint_and_signals(step, agreed_signal);
  }

  StepMetrics metrics_row(int step, const StepResult& result) {
    const double seconds = result.seconds;
    StepMetrics row;
    row.step = step;
    row.loss = result.outcome.loss;
    row.lr = result.lr;
    row.grad_norm = result.outcome.grad_norm;
    row.ms = seconds * 1e3;
    row.tokens_per_s =
        seconds > 0.0 ? static_cast<double>(config_.total_batch_size) / seconds : 0.0;
    row.attn = to_string(config_.model.attention);
    row.device = to_string(config_.device);
    row.precision = to_string(config_.model.precision);
    row.micro_batches = config_.grad_accum_steps;
    row.skipped = !result.outcome.applied;
    row.world_size = config_.world_size;
    totals_.last_loss = row.loss;
    if (const int saturated = result.outcome.fp8_saturated; saturated >= 0) {
      row.fp8_saturated = saturated;
      totals_.fp8_saturated = totals_.fp8_saturated.value_or(0) + saturated;
      if (saturated > 0) ++totals_.fp8_saturated_steps;
    }
    return row;
  }

  // Data parallel: the ranks agree on whether a signal asks them to stop (each may have
  // received it between other steps; all must stop after the same one), and the line shows
  // the largest rank's memory and time in collectives. Returns the agreed signal (0: none).
  int agree_across_ranks(const StepResult& result, StepMetrics& row) {
    const std::optional<Model::CommunicationTime>& device_comm = result.device_comm;
    const double exposed_seconds = device_comm ? device_comm->exposed_ms * 1e-3 : 0.0;
    if (data_parallel_) {
      double shared[4] = {static_cast<double>(StopSignals::received()),
                          static_cast<double>(row.peak_mem_bytes), result.comm_seconds,
                          exposed_seconds};
      comm_.all_reduce(shared, 4, ReduceOp::kMax);
      row.peak_mem_bytes = static_cast<size_t>(shared[1]);
      row.comm_ms = shared[2] * 1e3;
      totals_.comm_seconds.push_back(shared[2]);
      if (device_comm) {
        row.comm_exposed_ms = shared[3] * 1e3;
        totals_.comm_exposed_seconds.push_back(shared[3]);
      }
      totals_.peak_mem_bytes = row.peak_mem_bytes;
      return static_cast<int>(shared[0]);
    }
    if (device_comm) {  // NCCL at world size 1
      row.comm_ms = result.comm_seconds * 1e3;
      row.comm_exposed_ms = exposed_seconds * 1e3;
      totals_.comm_seconds.push_back(result.comm_seconds);
      totals_.comm_exposed_seconds.push_back(exposed_seconds);
    }
    return 0;
  }

  [[noreturn]] void stop_diverged(int step, const Model::StepOutcome& outcome) {
    const std::string what = str_cat("the loss is ", printable(outcome.loss),
                                     " and the gradient norm is ", printable(outcome.grad_norm));
    if (config_.on_nonfinite == NonFinitePolicy::kStop)
      GPT2_FAIL("step ", step, ": ", what, ": the run diverged and stops here (--on-nonfinite ",
                "stop); the update of step ", step, " was not applied and no checkpoint holds ",
                "it. Lower --lr, or pass --on-nonfinite skip-step to skip such steps");
    GPT2_FAIL("step ", step, ": ", what, ": ", standing_.skipped_in_a_row,
              " steps in a row had their ",
              "update skipped (--on-nonfinite skip-step): the run diverged and stops here. ",
              "Lower --lr");
  }

  // Periodic pairs, and the final one (the run's end, or a signal's stop) unless --save-final
  // 0 with no periodic ones: a run leaves its weights behind. After a step during which a
  // signal arrived: the final pair, what was saved, and 128 + the signal.
  std::optional<int> checkpoint_and_signals(int step, int agreed_signal) {
    const bool last_step = step == config_.steps;
    const bool checkpointing = config_.checkpoint_every > 0;
    const bool saving_final = checkpointing || config_.save_final;
    const bool checkpoint_step = (checkpointing && step % config_.checkpoint_every == 0) ||
                                 (saving_final && last_step);
    if (checkpoint_step) save_checkpoint(step);

    const int signal_number = data_parallel_ ? agreed_signal : StopSignals::received();
    if (signal_number == 0) return std::nullopt;
    if (saving_final && !checkpoint_step) save_checkpoint(step);
    if (last_step && root_) report_summary(config_, *model_, plan_, totals_, standing_);
    if (metrics_ && (saving_final || last_step)) write_plot();
    if (saving_final) {
      std::printf("stopped by %s after step %d of %d: saved %s and %s; --resume continues "
                  "from there\n",
                  signal_name(signal_number), step, config_.steps,
                  model_checkpoint_path(config_.out_dir, step).c_str(),
                  training_state_path(config_.out_dir, step).c_str());
    } else {
      std::printf("stopped by %s after step %d of %d: no checkpoint saved (--save-final 0 "
                  "and --checkpoint-every 0)\n",
                  signal_name(signal_number), step, config_.steps);
    }
    std::fflush(stdout);
    return 128 + signal_number;
  }

  void save_checkpoint(int step) {
    write_checkpoint(config_, *model_, step, *train_loader_, sample_rng_, standing_, comm_);
  }

  void write_plot() {
    write_loss_plot(config_.out_dir, metrics_path(config_.out_dir), config_.steps,
                    loss_plot_title(config_, standing_.run_id));
  }

  // Rank 0: the summary, the curves and where they are.
  void finish() {
    if (!root_) return;
    report_summary(config_, *model_, plan_, totals_, standing_);
    write_plot();
    std::printf("out: loss curves in %s, the run's configuration in %s\n",
                loss_plot_path(config_.out_dir).c_str(),
                config_record_path(config_.out_dir).c_str());
  }

  const TrainConfig& config_;
  Communicator& comm_;
  // Rank 0 owns --out (lock, metrics, summary, checkpoints) and the resume point; every rank
  // reads its own windows of the data.
  const bool root_;
  const bool data_parallel_;
  std::optional<RunDirLock> out_lock_;
  std::optional<Gpt2Tokenizer> tokenizer_;
  std::unique_ptr<DataLoader> train_loader_;
  std::unique_ptr<DataLoader> val_loader_;
  Rng sample_rng_;
  RunStart run_start_;
  RunStanding standing_;
  int first_step_ = 1;
  bool resuming_ = false;
  std::unique_ptr<Communicator> nccl_;
  std::unique_ptr<Communicator> context_group_;
  std::unique_ptr<RankBatch> batch_;
  bool batch_pending_ = false;  // batch_ holds the first training batch, not yet trained on
  int val_batches_ = 0;
  MemoryPlan plan_;
  std::unique_ptr<Model> model_;
  std::optional<MetricsFile> metrics_;
  RunTotals totals_;
  std::optional<StopSignals> stop_signals_;
};

}  // namespace

int run_training(const TrainConfig& config) {
  SingleProcessCommunicator single;
  return run_training(config, single);
}

int run_training(const TrainConfig& config, Communicator& comm) {
  GPT2_CHECK(comm.world_size() == config.world_size && comm.rank() == config.rank, "rank ",
             config.rank, " of ", config.world_size, " configured, the communicator has rank ",
             comm.rank(), " of ", comm.world_size());
  TrainingRun run(config, comm);
  return run.run();
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
    CommandLine cli = parse_command_line(args);
    if (cli.help) {
      std::printf("%s", usage_text().c_str());
      return 0;
    }
    // Probing initializes the CUDA runtime: not worth it when the CPU is asked for by name.
    if (comm->local_size() > 1 && cli.device != "cpu") select_gpu_of_local_rank(comm->local_rank());
    const DeviceAvailability devices = cli.device == "cpu" ? DeviceAvailability{} : probe_devices();
    const JobRanks ranks{comm->rank(), comm->world_size()};
    return run_training(resolve_train_config(std::move(cli), devices, ranks), *comm);
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
