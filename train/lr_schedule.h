/**
 * @file lr_schedule.h
 * @brief Learning-rate schedules: linear warm-up, then cosine, linear or constant.
 *
 * step is 0-based. Warm-up (step < warmup_steps): lr = max_lr * (step + 1) / warmup_steps.
 * After it, with r = (step - warmup) / (total_steps - warmup) in [0, 1] and
 * min_lr = max_lr * final_lr_frac:
 *   cosine:   min_lr + 0.5 (1 + cos(pi r)) (max_lr - min_lr)
 *   linear:   max_lr - r (max_lr - min_lr)
 *   constant: max_lr
 */
#pragma once

#include <string>

namespace gpt2 {

enum class LrScheduleKind { kCosine, kLinear, kConstant };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kCosine;
  float max_lr = 3e-4f;
  int warmup_steps = 0;
  int total_steps = 1;
  float final_lr_frac = 0.0f;

  float at(int step) const;
};

/// "cosine" | "linear" | "constant"; throws gpt2::UsageError otherwise.
LrScheduleKind parse_lr_schedule(const std::string& name);
const char* to_string(LrScheduleKind kind);

}  // namespace gpt2
