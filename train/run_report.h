/**
 * @file run_report.h
 * @brief What gpt2-train prints about a run (rank 0): the configuration, once the input is
 *        checked and before the model is built; the summary at the end of the run, on stdout
 *        and in OUT/summary.json (throughput after warm-up, peak memory against the plan, time in
 *        collectives, final losses, skipped updates, MFU where the device's peak is known).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "data/dataloader.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "train/metrics.h"
#include "train/options.h"
#include "train/run_files.h"

namespace gpt2 {

/// val: nullptr when the run does not validate. resuming: the run continues an earlier one.
void print_configuration(const TrainConfig& c, const DataLoader& train, const DataLoader* val,
                         uint64_t run_id, bool resuming);

/// What the steps add up to, for the summary.
struct RunTotals {
  ThroughputStats throughput;
  std::vector<double> comm_seconds;  // data parallel: per step, the largest rank's
  std::vector<double> comm_exposed_seconds;  // NCCL: per step, the largest rank's
  size_t peak_mem_bytes = 0;         // data parallel: the largest rank's, at the last step
  std::optional<float> last_loss;
  std::optional<float> last_val_loss;
  /// --precision fp8: saturated tensor casts summed over the steps, and the steps with any.
  std::optional<int64_t> fp8_saturated;
  int fp8_saturated_steps = 0;
};

void report_summary(const TrainConfig& config, const Model& model, const MemoryPlan& plan,
                    const RunTotals& totals, const RunStanding& standing);

}  // namespace gpt2
