#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace gpt2 {

float LrSchedule::at(int step) const {
  if (step < warmup_steps) return max_lr * static_cast<float>(step + 1) / warmup_steps;
  if (kind == LrScheduleKind::kConstant) return max_lr;
  const double min_lr = static_cast<double>(max_lr) * final_lr_frac;
  const int decay_steps = total_steps - warmup_steps;
  const double r =
      decay_steps <= 0 ? 1.0 : std::clamp(double(step - warmup_steps) / decay_steps, 0.0, 1.0);
  if (kind == LrScheduleKind::kLinear) return static_cast<float>(max_lr - r * (max_lr - min_lr));
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * r));
  return static_cast<float>(min_lr + coeff * (max_lr - min_lr));
}

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "cosine") return LrScheduleKind::kCosine;
  if (name == "linear") return LrScheduleKind::kLinear;
  if (name == "constant") return LrScheduleKind::kConstant;
  GPT2_USAGE_FAIL("--lr-schedule must be cosine, linear or constant (got '", name, "')");
}

const char* to_string(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::kCosine: return "cosine";
    case LrScheduleKind::kLinear: return "linear";
    case LrScheduleKind::kConstant: return "constant";
  }
  return "?";
}

}  // namespace gpt2
