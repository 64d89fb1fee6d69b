/**
 * @file run_report.cpp
 * @brief What gpt2-train prints about a run: its configuration before the model is built, and
 *        the summary (stdout and OUT/summary.json) at its end.
 */
#include "train/run_report.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/file_io.h"
#include "base/json.h"
#include "base/version.h"
#include "model/context_parallel.h"
#include "model/parameters.h"
#include "parallel/shard_plan.h"
#include "train/metrics.h"
#include "train/run_files.h"

namespace gpt2 {

namespace {

void print_data(const char* label, const DataLoader& loader) {
  std::printf("  %-18s %zu file(s), %lld tokens, %lld batches per epoch\n", label,
              loader.files().size(), static_cast<long long>(loader.total_tokens()),
              static_cast<long long>(loader.batches_per_epoch()));
  for (const std::string& file : loader.files()) std::printf("  %-18s   %s\n", "", file.c_str());
}

}  // namespace

void print_configuration(const TrainConfig& c, const DataLoader& train, const DataLoader* val,
                         uint64_t run_id, bool resuming) {
  const size_t num_params = ParameterLayout::for_config(c.model.config).total;
  std::printf("gpt2-train configuration\n");
  std::printf("  %-18s %s (%s)\n", "run", format_run_id(run_id).c_str(),
              resuming ? "continued" : "new");
  std::printf("  %-18s %s\n", "device", to_string(c.device));
  std::printf("  %-18s %s%s: %s, %.2fM parameters\n", "model", c.model_name.c_str(),
              c.model_source == ModelSource::kLlmcFile       ? " (checkpoint)"
              : c.model_source == ModelSource::kHfDirectory ? " (Hugging Face)"
                                                              : "",
              c.model.config.describe().c_str(),
              static_cast<double>(num_params) / 1e6);
  std::printf("  %-18s %s", "attention", to_string(c.model.attention));
  if (c.device == DeviceKind::kCuda && c.model.attention == AttentionKind::kFlash)
    std::printf(" (kernel %s, %s backward)", to_string(c.model.flash_kernel),
                c.model.deterministic_attention ? "deterministic" : "non-deterministic");
  std::printf("\n");
  std::printf("  %-18s %s%s%s", "precision", to_string(c.model.precision),
              !c.model.fp8_classifier                  ? ""
              : c.model.fp8_classifier_weight_gradient ? " (the classifier's GEMMs too, dwte too)"
                                                       : " (the classifier's GEMMs too)",
              c.model.fp8_fast_accumulation ? " (forward GEMMs: fast accumulation)" : "");
  if (c.model.precision == Precision::kFp8)
    std::printf(" (delayed scales: amax history %d, margin %d, gradients' margin %d)",
                c.model.fp8_amax_history, c.model.fp8_margin, c.model.fp8_gradient_margin);
  std::printf("\n");
  std::printf("  %-18s B=%d T=%d world=%d\n", "micro-batch", c.model.batch_size, c.model.seq_len,
              c.world_size);
  if (c.world_size > 1 || c.nccl) {
    const ShardPlan shards =
        gradient_bucket_plan(c.model.config, c.device, c.model.bucket_elements, c.world_size,
                             c.rank);
    std::printf("  %-18s %d rank(s) over %s, ZeRO-%d: gradients %s in %s in %zu bucket(s) of "
                "up to %zu elements%s, %s",
                "data parallel", c.world_size, c.nccl ? "NCCL" : "MPI", c.model.zero_stage,
                c.model.zero_stage == 1 ? "reduce-scattered" : "all-reduced",
                to_string(c.model.grad_reduce),
                shards.buckets().size(), shards.max_bucket_size(),
                c.device == DeviceKind::kCuda ? " (each layer in buckets of its own)" : "",
                c.model.zero_stage == 1
                    ? (c.device == DeviceKind::kCuda
                           ? "AdamW state and master weights sharded, parameters all-gathered"
                           : "AdamW state sharded, parameters all-gathered")
                    : "AdamW state on every rank");
    if (c.nccl)
      std::printf(", reductions %s%s",
                  c.model.overlap_communication ? "overlapped with the last backward"
                                                : "after the backward",
                  c.model.zero_stage != 1  ? ""
                  : c.model.overlap_gather ? ", gathers overlapped with the next forward"
                                           : ", gathers after the update");
    std::printf("\n");
  }
  std::printf("  %-18s %lld tokens = %d grad accumulation step(s) x B*T*%s\n", "total batch",
              static_cast<long long>(c.total_batch_size), c.grad_accum_steps,
              c.context_parallel > 1 ? "replicas" : "world");
  if (c.context_parallel > 1) {
    const ContextShard shard = context_shard(c.model.seq_len, c.context_parallel, 0);
    std::printf("  %-18s %d rank(s) share each sequence (%d replica(s)): each holds 2 of %d "
                "chunks, up to %d of its %d positions\n",
                "context parallel", c.context_parallel, c.data_parallel_size(),
                2 * c.context_parallel, shard.max_local, c.model.seq_len);
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

void report_summary(const TrainConfig& config, const Model& model, const MemoryPlan& plan,
                    const RunTotals& totals, const RunStanding& standing) {
  const double tokens_per_s = totals.throughput.mean_tokens_per_s();
  const size_t peak = std::max(model.peak_memory_bytes(), totals.peak_mem_bytes);
  const int world = config.world_size;
  const double flops_per_token =
      training_flops_per_token(config.model.config, config.model.seq_len);
  const bool on_cuda = config.device == DeviceKind::kCuda;
  // 0: no known peak for the device (or a CPU run): MFU is not reported.
  const double peak_throughput =
      on_cuda ? peak_flops(model.device_name(), config.model.precision).value_or(0.0) : 0.0;
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
  // The block tensors that saturated, most often first (the classifier's input counts only in
  // the total).
  std::vector<std::pair<std::string, int64_t>> saturated;
  if (totals.fp8_saturated.value_or(0) > 0) {
    saturated = model.fp8_saturated_tensors();
    std::stable_sort(saturated.begin(), saturated.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
  }
  if (totals.fp8_saturated) {
    std::printf("  %-18s %lld saturated tensor casts in %d of %d step(s) (delayed scales that "
                "lagged their tensors)\n",
                "fp8 saturation", static_cast<long long>(*totals.fp8_saturated),
                totals.fp8_saturated_steps, totals.throughput.steps());
    constexpr size_t kShown = 6;
    std::string most;
    for (size_t i = 0; i < std::min(saturated.size(), kShown); ++i)
      most += str_cat(i ? ", " : "", saturated[i].first, " ", saturated[i].second);
    if (!most.empty())
      std::printf("  %-18s %s%s (steps)\n", "most saturated", most.c_str(),
                  saturated.size() > kShown ? ", ..." : "");
  }
  if (peak_throughput > 0) {
    // fp8 is measured against bf16's peak (metrics.cpp's peak_flops), and says so.
    const char* peak_of =
        config.model.precision == Precision::kFp8 ? "bf16" : to_string(config.model.precision);
    std::printf("  %-18s %.2f%% (%.4g FLOPs/token, %s peak %.1f TFLOP/s)\n", "MFU", 100.0 * mfu,
                flops_per_token, peak_of, peak_throughput / 1e12);
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
    summary["zero_stage"] = config.model.zero_stage;
  }
  if (config.nccl) {
    summary["comm_backend"] = "nccl";
    summary["overlap_comm"] = config.model.overlap_communication;
    summary["overlap_gather"] = config.model.overlap_gather;
  }
  if (world > 1 || config.nccl) {
    const ShardPlan buckets =
        gradient_bucket_plan(config.model.config, config.device, config.model.bucket_elements,
                             world, config.rank);
    summary["grad_reduce"] = to_string(config.model.grad_reduce);
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
  if (totals.fp8_saturated) {
    summary["fp8_saturated_casts"] = *totals.fp8_saturated;
    summary["fp8_saturated_steps"] = totals.fp8_saturated_steps;
    Json by_tensor = Json::object();
    for (const auto& [name, steps] : saturated) by_tensor[name] = steps;
    summary["fp8_saturated_tensors"] = by_tensor;
  }
  summary["flops_per_token"] = flops_per_token;
  if (peak_throughput > 0) {
    summary["mfu"] = mfu;
    summary["peak_flops"] = peak_throughput;
  }
  summary["device"] = to_string(config.device);
  summary["device_name"] = model.device_name();
  summary["model"] = config.model.config.describe();
  summary["attn"] = to_string(config.model.attention);
  summary["attn_kernel"] = model.attention_kernel();
  summary["precision"] = to_string(config.model.precision);
  summary["batch_size"] = config.model.batch_size;
  summary["seq_len"] = config.model.seq_len;
  summary["total_batch_size"] = config.total_batch_size;
  const std::string json = dump_json(summary) + "\n";
  write_text_file(summary_path(config.out_dir), json);
}

}  // namespace gpt2
