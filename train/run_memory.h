/**
 * @file run_memory.h
 * @brief The memory a run plans before it allocates: the backend's plan, and on the CPU what
 *        the process holds besides the model's buffers; and the CPU plan against the host.
 */
#pragma once

#include <cstddef>

#include "model/memory_plan.h"
#include "model/model.h"
#include "train/options.h"

namespace gpt2 {

/// The plan the run prints and reports. On the GPU it is the backend's (device memory). On the
/// CPU the measured peak is the whole process's high-water mark, so the plan adds what the
/// process holds besides the model's buffers: what is resident before allocation (code,
/// libraries, the data and tokenizer read so far, a resume point's copies; *resident, 0 on the
/// GPU) and the fp32 copies of the parameters that initialization (one) or a checkpoint
/// (parameters, m and v: three) makes on the host.
MemoryPlan run_memory_plan(const TrainConfig& config, const ModelOptions& options, bool resuming,
                           size_t* resident);

/// Throws gpt2::Error ("not enough CPU memory", naming the plan's printed total) when a CPU
/// run's plan, less what is resident already (which MemAvailable does not count), exceeds the
/// host's available memory; checked before any of the model's buffers exists.
void check_host_plan_fits(const MemoryPlan& plan, size_t resident);

}  // namespace gpt2
