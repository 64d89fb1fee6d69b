// A diverged run never reports success and never saves NaN: with --lr 1e3 the loss of d1 on the
// embedded data overflows to NaN at step 8. --on-nonfinite stop (the default) ends the run
// there with exit code 1 and a message naming the step; skip-step skips such updates and gives
// up after 10 in a row, and the streak is part of the training state, so a run resumed inside
// a streak stops where the uninterrupted run stops; a checkpoint whose parameters are not
// finite is refused; NaN is printed as "nan", never "-nan".
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "train/run_files.h"
#include "train_test_util.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;
using testing::embedded_train_data;
using testing::read_metrics;
using testing::run_trainer;
using testing::scratch_dir;

// d1 with B*T = 16: about 30 ms a step.
std::vector<std::string> diverging_run(const std::string& out, int steps, const char* lr,
                                       std::vector<std::string> more) {
  std::vector<std::string> args = {
      "--device", "cpu", "--model", "d1", "--max-seq-len", "64", "--batch-size", "1",
      "--seq-len", "16", "--steps", std::to_string(steps), "--lr", lr, "--val-every", "0",
      "--train-data", embedded_train_data(), "--out", out};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

bool all_finite(const std::vector<float>& values) {
  for (const float v : values)
    if (!std::isfinite(v)) return false;
  return true;
}

TEST(NonFinite, StopIsTheDefaultExitsOneNamingTheStepAndSavesNothingAfterIt) {
  const std::string out = scratch_dir();
  const auto result = run_trainer(diverging_run(out, 12, "1e3", {"--checkpoint-every", "4"}));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("gpt2-train: error: step 8: the loss is "), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("--on-nonfinite skip-step"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("step  9/12"), std::string::npos) << result.output;
  // The last line of metrics.jsonl is the failing step, its loss null, its update skipped.
  const auto rows = read_metrics(metrics_path(out));
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_TRUE(rows.back().at("loss").is_null());
  EXPECT_EQ(rows.back().at("skipped"), true);
  EXPECT_EQ(rows[6].count("skipped"), 0u);
  // Step 4's checkpoint exists and is finite; nothing after the divergence was saved.
  EXPECT_TRUE(all_finite(read_model_checkpoint(model_checkpoint_path(out, 4)).params));
  EXPECT_FALSE(fs::exists(model_checkpoint_path(out, 8)));
  EXPECT_FALSE(fs::exists(out + "/summary.json"));
  fs::remove_all(out);
}

TEST(NonFinite, SkipStepSkipsTheUpdatesAndGivesUpAfterTenInARow) {
  const std::string dir = scratch_dir();
  {
    SCOPED_TRACE("5 skipped steps: the run finishes, the checkpoint holds step 7's weights");
    const std::string out = dir + "/a";
    const auto result = run_trainer(diverging_run(
        out, 12, "1e3", {"--on-nonfinite", "skip-step", "--checkpoint-every", "6"}));
    EXPECT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("5 (non-finite loss or gradient norm)"), std::string::npos)
        << result.output;
    const auto rows = read_metrics(metrics_path(out));
    ASSERT_EQ(rows.size(), 12u);
    for (int step = 1; step <= 12; ++step)
      EXPECT_EQ(rows[step - 1].count("skipped"), step >= 8 ? 1u : 0u) << "step " << step;
    const std::vector<float> at_12 = read_model_checkpoint(model_checkpoint_path(out, 12)).params;
    EXPECT_TRUE(all_finite(at_12));
    EXPECT_EQ(parse_json(read_file_text(out + "/summary.json"), "summary").at("skipped_steps"), 5);
  }
  {
    SCOPED_TRACE("10 skipped steps in a row stop the run");
    const std::string out = dir + "/b";
    const auto result =
        run_trainer(diverging_run(out, 30, "1e3", {"--on-nonfinite", "skip-step"}));
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_NE(result.output.find("gpt2-train: error: step 17: "), std::string::npos)
        << result.output;
    EXPECT_NE(result.output.find("10 steps in a row"), std::string::npos) << result.output;
    EXPECT_EQ(read_metrics(metrics_path(out)).size(), 17u);
  }
  fs::remove_all(dir);
}

TEST(NonFinite, ResumedInsideASkipStreakTheRunStopsWhereTheUninterruptedRunStops) {
  const std::string out = scratch_dir();
  const std::vector<std::string> args = diverging_run(
      out, 30, "1e3", {"--on-nonfinite", "skip-step", "--checkpoint-every", "12", "--resume"});
  // Steps 8.. are skipped; the checkpoint of step 12 is inside the streak (5 so far), and step
  // 17 is the tenth in a row.
  const auto uninterrupted = run_trainer(args);
  EXPECT_EQ(uninterrupted.exit_code, 1) << uninterrupted.output;
  EXPECT_NE(uninterrupted.output.find("gpt2-train: error: step 17: "), std::string::npos)
      << uninterrupted.output;
  const TrainingState state = read_training_state(training_state_path(out, 12));
  EXPECT_EQ(state.skipped_in_a_row, 5);
  EXPECT_EQ(state.skipped_total, 5);

  const auto resumed = run_trainer(args);  // continues from step 12's pair
  EXPECT_EQ(resumed.exit_code, 1) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 13"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("gpt2-train: error: step 17: "), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("10 steps in a row"), std::string::npos) << resumed.output;
  EXPECT_EQ(read_metrics(metrics_path(out)).size(), 17u);
  fs::remove_all(out);
}

TEST(NonFinite, NanIsPrintedWithoutASign) {
  // This run's NaN has its sign bit set (printf and streams wrote "-nan").
  const std::string out = scratch_dir();
  const auto result = run_trainer(diverging_run(out, 9, "1e3", {}));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("step 9/9 | loss nan |"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("step 9: the loss is nan and the gradient norm is nan"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("-nan"), std::string::npos) << result.output;
  fs::remove_all(out);
}

TEST(NonFinite, ACheckpointWithNonFiniteParametersIsNeverWritten) {
  // At the largest float learning rate the first update overflows wte to -inf while the loss
  // and gradient norm of step 1 (computed before it) are finite.
  const std::string out = scratch_dir();
  const auto result =
      run_trainer(diverging_run(out, 2, "3.4e38", {"--checkpoint-every", "1"}));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("gpt2-train: error: step 1: not writing a checkpoint: the "
                               "parameter wte["),
            std::string::npos)
      << result.output;
  EXPECT_FALSE(fs::exists(model_checkpoint_path(out, 1)));
  EXPECT_FALSE(fs::exists(training_state_path(out, 1)));
  fs::remove_all(out);
}

TEST(NonFinite, PolicyNameIsChecked) {
  const auto result = run_trainer({"--on-nonfinite", "ignore"});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("--on-nonfinite must be stop or skip-step (got 'ignore')"),
            std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace gpt2
