/**
 * @file metrics.h
 * @brief Per-step metrics: the console line, the metrics.jsonl record, throughput statistics.
 *
 * OUT/metrics.jsonl holds one flat JSON object per optimizer step, e.g.
 *   {"step":3,"loss":10.2,"lr":0.0006,"grad_norm":1.5,"ms":120,"tokens_per_s":2133,
 *    "peak_mem_bytes":123456,"attn":"flash","device":"cpu","precision":"fp32","micro_batches":1}
 * plus "val_loss" on the steps that measured it and "skipped":true on a step whose update was
 * skipped (--on-nonfinite skip-step). A data-parallel run (several ranks) adds "world_size" and
 * "comm_ms" (the step's time in collectives, the largest over the ranks: MPI's wall time, or
 * the GPU time of the NCCL collectives); its tokens_per_s is the job's (every rank's tokens)
 * and peak_mem_bytes the largest rank's. A run through NCCL (any world size) adds "comm_ms" and
 * "comm_exposed_ms", the part of it the computation waited for. An fp8 run adds "fp8_saturated",
 * the tensors whose FP8 casts saturated in the step. Lines are written through base/json.h: floats
 * as their shortest round-trip decimal (a float read back is bit-identical, which the resume
 * tests rely on), non-finite values as null, so every line is valid JSON.
 */
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"

namespace gpt2 {

struct StepMetrics {
  int step = 0;  // 1-based
  float loss = 0.0f;
  std::optional<float> val_loss;
  float lr = 0.0f;
  float grad_norm = 0.0f;
  double ms = 0.0;
  double tokens_per_s = 0.0;
  size_t peak_mem_bytes = 0;
  std::string attn;
  std::string device;
  std::string precision;
  int micro_batches = 1;
  bool skipped = false;  // the update was not applied (non-finite loss or gradient norm)
  int world_size = 1;
  std::optional<double> comm_ms;  // data parallel: time in collectives, largest over the ranks
  /// NCCL: the part of comm_ms the compute stream waited for (not hidden behind the backward).
  std::optional<double> comm_exposed_ms;
  /// --precision fp8: the tensors whose casts saturated this step (a delayed scale that lagged
  /// its tensor's growth; Model::StepOutcome::fp8_saturated).
  std::optional<int> fp8_saturated;
};

/// One metrics.jsonl line, without the trailing newline.
std::string to_json_line(const StepMetrics& metrics);

/// metrics.jsonl opened for appending whole lines. A failed append (disk full, file size limit)
/// throws gpt2::Error naming the file, the step and the system's reason, after cutting the file
/// back to where it ended before, so no partial line is ever left in it.
class MetricsFile {
 public:
  /// Creates the file when missing; throws gpt2::Error naming it when it cannot be opened.
  explicit MetricsFile(const std::string& path);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  /// Appends line and a newline, with write(2): on disk (in the page cache) when it returns.
  void append_line(const std::string& line, int step);

 private:
  std::string path_;
  int fd_ = -1;
};

/// v as messages should show it: a NaN without its sign bit, so that printf and streams write
/// "nan", never "-nan" (the sign of a NaN means nothing).
inline double printable(double v) { return std::isnan(v) ? std::fabs(v) : v; }

/// The console line of a step; eta_seconds < 0 omits the ETA. Data parallel: "| 120.0 ms (comm
/// 12.3 ms) |" and the peak memory "per rank".
std::string format_step_line(const StepMetrics& metrics, int total_steps, double eta_seconds);

/// "1h02m", "3m05s", "12s".
std::string format_duration(double seconds);

/// Model FLOPs per trained token (forward + backward), for MFU; see metrics.cpp.
double training_flops_per_token(const ModelConfig& config, int seq_len);

/// The MFU denominator: the device's peak dense throughput for the run's arithmetic (bf16 tensor
/// cores with fp32 accumulation, or fp32 without TF32), by the vendor's datasheet, looked up by
/// the device's name ("NVIDIA H100 80GB HBM3" -> H100 SXM, bf16 989e12). nullopt for a device
/// the table does not know (MFU is then not reported rather than guessed).
std::optional<double> peak_flops(const std::string& device_name, Precision precision);

/// Step times of one run; the first min(3, n - 1) steps are warm-up (allocation, caches,
/// cuBLAS heuristics) and are left out of the mean throughput.
class ThroughputStats {
 public:
  void add_step(double seconds, int64_t tokens);

  int steps() const { return static_cast<int>(seconds_.size()); }
  int warmup_steps_excluded() const;
  /// Tokens per second over the steps after warm-up: their tokens / their time.
  double mean_tokens_per_s() const;
  /// Mean seconds per step after warm-up when there are such steps, else over all steps.
  double mean_step_seconds() const;

 private:
  std::vector<double> seconds_;
  std::vector<int64_t> tokens_;
};

}  // namespace gpt2
