// LrSchedule: linear warm-up, then cosine / linear / constant decay to max_lr * final_lr_frac.
// Expected values follow from the formulas in train/lr_schedule.h at points where they are
// simple (r = 0, 1/2, 1).
#include "train/lr_schedule.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace gpt2 {
namespace {

LrSchedule make_schedule(LrScheduleKind kind, int warmup, int total, float frac) {
  LrSchedule s;
  s.kind = kind;
  s.max_lr = 1e-3f;
  s.warmup_steps = warmup;
  s.total_steps = total;
  s.final_lr_frac = frac;
  return s;
}

TEST(LrSchedule, WarmupRisesLinearlyToTheMaximum) {
  for (LrScheduleKind kind : {LrScheduleKind::kCosine, LrScheduleKind::kLinear,
                              LrScheduleKind::kConstant}) {
    const LrSchedule s = make_schedule(kind, 10, 110, 0.1f);
    for (int step = 0; step < 10; ++step)
      EXPECT_FLOAT_EQ(s.at(step), 1e-3f * (step + 1) / 10) << to_string(kind) << " " << step;
    EXPECT_FLOAT_EQ(s.at(9), 1e-3f);  // the last warm-up step reaches max_lr
  }
}

TEST(LrSchedule, CosineEndpointsMidpointAndMonotonicDecay) {
  const LrSchedule s = make_schedule(LrScheduleKind::kCosine, 10, 110, 0.1f);
  EXPECT_FLOAT_EQ(s.at(10), 1e-3f);                    // r = 0
  EXPECT_FLOAT_EQ(s.at(60), 1e-4f + 0.5f * 9e-4f);     // r = 1/2: halfway between max and min
  EXPECT_FLOAT_EQ(s.at(110), 1e-4f);                   // r = 1: min_lr
  EXPECT_FLOAT_EQ(s.at(500), 1e-4f);                   // clamped past the end
  for (int step = 11; step <= 110; ++step) EXPECT_LE(s.at(step), s.at(step - 1)) << step;
  // Symmetry of the cosine about r = 1/2.
  EXPECT_NEAR(s.at(35) - 5.5e-4f, 5.5e-4f - s.at(85), 1e-9);
}

TEST(LrSchedule, LinearDecaysByEqualAmounts) {
  const LrSchedule s = make_schedule(LrScheduleKind::kLinear, 0, 100, 0.0f);
  EXPECT_FLOAT_EQ(s.at(0), 1e-3f);
  EXPECT_FLOAT_EQ(s.at(50), 5e-4f);
  EXPECT_FLOAT_EQ(s.at(100), 0.0f);
  for (int step = 1; step <= 100; ++step) EXPECT_NEAR(s.at(step - 1) - s.at(step), 1e-5, 1e-9);
}

TEST(LrSchedule, ConstantStaysAtTheMaximumAfterWarmup) {
  const LrSchedule s = make_schedule(LrScheduleKind::kConstant, 5, 50, 0.1f);
  for (int step = 5; step < 60; ++step) EXPECT_EQ(s.at(step), 1e-3f) << step;
}

TEST(LrSchedule, WarmupLongerThanTrainingStaysFinite) {
  const LrSchedule s = make_schedule(LrScheduleKind::kCosine, 20, 10, 0.1f);
  for (int step = 0; step < 30; ++step) {
    EXPECT_GT(s.at(step), 0.0f);
    EXPECT_LE(s.at(step), 1e-3f);
  }
}

TEST(LrSchedule, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(parse_lr_schedule("cosine"), LrScheduleKind::kCosine);
  EXPECT_EQ(parse_lr_schedule("linear"), LrScheduleKind::kLinear);
  EXPECT_EQ(parse_lr_schedule("constant"), LrScheduleKind::kConstant);
  EXPECT_THROW(parse_lr_schedule("step"), UsageError);
  for (LrScheduleKind kind : {LrScheduleKind::kCosine, LrScheduleKind::kLinear,
                              LrScheduleKind::kConstant})
    EXPECT_EQ(parse_lr_schedule(to_string(kind)), kind);
}

}  // namespace
}  // namespace gpt2
