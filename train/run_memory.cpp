/**
 * @file run_memory.cpp
 * @brief run_memory_plan and check_host_plan_fits (run_memory.h).
 */
#include "train/run_memory.h"

#include <algorithm>

#include "base/error.h"
#include "model/parameters.h"

namespace gpt2 {

MemoryPlan run_memory_plan(const TrainConfig& config, const ModelOptions& options, bool resuming,
                           size_t* resident) {
  MemoryPlan plan = plan_model_memory(options, config.device);
  *resident = 0;
  if (config.device != DeviceKind::kCpu) return plan;
  *resident = resident_memory_bytes();
  plan.add("host", "process before allocation (VmRSS: code, data read so far)", *resident);
  const size_t param_bytes =
      ParameterLayout::for_config(config.model.config).total * sizeof(float);
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

void check_host_plan_fits(const MemoryPlan& plan, size_t resident) {
  const size_t available = available_host_memory_bytes();
  const size_t needed = plan.total() - std::min(resident, plan.total());
  if (available == 0 || needed <= available) return;
  GPT2_FAIL("not enough CPU memory: the plan above needs ", plan.total(), " bytes (",
            format_bytes(plan.total()), ") in total, ", format_bytes(resident), " of it resident "
            "already; the other ", needed, " bytes (", format_bytes(needed), ") are more than the ",
            available, " bytes (", format_bytes(available), ") available (MemAvailable in "
            "/proc/meminfo). Use a smaller --batch-size or --seq-len, or a smaller model");
}

}  // namespace gpt2
