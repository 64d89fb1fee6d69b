// --resume continues a run bit for bit: steps 5..8 after resuming from step 4's checkpoint
// write the same losses, norms, learning rates, validation losses and samples as the
// uninterrupted run. A model file without its state file is skipped for the previous
// complete pair, and a checkpoint from other settings is refused with both values named: the
// shape of the run, and what its learning rate, its updates and its end depend on (--lr,
// --steps of a decaying schedule, --weight-decay, --on-nonfinite, ...).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "train_test_util.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;
using testing::embedded_train_data;
using testing::embedded_val_data;
using testing::read_metrics;
using testing::run_trainer;
using testing::scratch_dir;

std::vector<std::string> run_args(const std::string& out, int steps) {
  return {"--device", "cpu", "--model", "d1", "--max-seq-len", "64", "--batch-size", "4",
          "--seq-len", "32", "--total-batch-size", "256", "--steps", std::to_string(steps),
          "--lr", "3e-3", "--warmup-steps", "2", "--val-every", "3", "--val-steps", "2",
          "--sample-every", "3", "--sample-tokens", "8", "--checkpoint-every", "4",
          "--train-data", embedded_train_data(), "--val-data", embedded_val_data(),
          "--out", out, "--resume"};
}

// The text printed after "sample at step N:" up to the "---" line.
std::string sample_text(const std::string& log, int step) {
  const std::string marker = "sample at step " + std::to_string(step) + ":\n";
  const size_t start = log.find(marker);
  if (start == std::string::npos) return "<no sample>";
  const size_t end = log.find("\n---\n", start);
  return log.substr(start + marker.size(), end - start - marker.size());
}

void copy_checkpoint(const std::string& from, const std::string& to, const char* name) {
  fs::copy_file(fs::path(from) / name, fs::path(to) / name);
}

using MetricsRows = std::vector<Json>;

// Rows of a resumed run carry exactly the reference's strings for the same steps.
void expect_same_steps(const MetricsRows& rows, const MetricsRows& reference) {
  for (const auto& row : rows) {
    const int step = row.at("step").get<int>();
    ASSERT_TRUE(step >= 1 && step <= static_cast<int>(reference.size())) << step;
    const auto& ref = reference[step - 1];
    for (const char* key : {"loss", "lr", "grad_norm", "val_loss"}) {
      ASSERT_EQ(row.count(key), ref.count(key)) << key << " at step " << step;
      if (row.count(key)) {
        EXPECT_EQ(row.at(key), ref.at(key)) << key << " at step " << step;
      }
    }
  }
}

// One test with phases: each phase needs the 8-step reference run, the expensive part, and
// ctest runs every TEST in its own process.
TEST(Resume, BitForBitSkipsIncompleteCheckpointsRefusesOtherSettings) {
  const std::string dir = scratch_dir();
  const std::string ref = dir + "/A";
  const auto reference = run_trainer(run_args(ref, 8));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const MetricsRows ref_rows = read_metrics(ref + "/metrics.jsonl");
  ASSERT_EQ(ref_rows.size(), 8u);
  for (const char* name : {"model_00000004.bin", "state_00000004.bin", "model_00000008.bin",
                           "state_00000008.bin"})
    ASSERT_TRUE(fs::exists(fs::path(ref) / name)) << name;

  {
    SCOPED_TRACE("resume from step 4 in a folder holding only that pair");
    const std::string resumed = dir + "/B";
    fs::create_directories(resumed);
    copy_checkpoint(ref, resumed, "model_00000004.bin");
    copy_checkpoint(ref, resumed, "state_00000004.bin");
    const auto result = run_trainer(run_args(resumed, 8));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("at step 5"), std::string::npos) << result.output;
    const MetricsRows rows = read_metrics(resumed + "/metrics.jsonl");
    ASSERT_EQ(rows.size(), 4u);
    EXPECT_EQ(rows.front().at("step"), 5);
    EXPECT_EQ(rows.back().at("step"), 8);
    expect_same_steps(rows, ref_rows);
    // The sampling RNG came back with the checkpoint: step 6's sample is the same text.
    EXPECT_EQ(sample_text(result.output, 6), sample_text(reference.output, 6));
    EXPECT_NE(sample_text(result.output, 6), "<no sample>");
    EXPECT_EQ(sample_text(result.output, 3), "<no sample>");
  }
  {
    SCOPED_TRACE("a model file without its state file is skipped; metrics are cut back");
    const std::string resumed = dir + "/C";
    fs::create_directories(resumed);
    copy_checkpoint(ref, resumed, "model_00000004.bin");
    copy_checkpoint(ref, resumed, "state_00000004.bin");
    copy_checkpoint(ref, resumed, "model_00000008.bin");  // its state "was lost in a crash"
    fs::copy_file(fs::path(ref) / "metrics.jsonl", fs::path(resumed) / "metrics.jsonl");
    const auto result = run_trainer(run_args(resumed, 8));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("model_00000008.bin has no training state"), std::string::npos)
        << result.output;
    EXPECT_NE(result.output.find("at step 5"), std::string::npos) << result.output;
    const MetricsRows rows = read_metrics(resumed + "/metrics.jsonl");
    ASSERT_EQ(rows.size(), 8u);  // 1..4 kept from the copied file, 5..8 appended
    for (int i = 0; i < 8; ++i) EXPECT_EQ(rows[i].at("step"), i + 1);
    expect_same_steps(rows, ref_rows);
  }
  {
    SCOPED_TRACE("a checkpoint of another --batch-size is refused");
    std::vector<std::string> args = run_args(ref, 12);
    args.insert(args.end(), {"--batch-size", "2"});
    const auto result = run_trainer(args);
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_NE(result.output.find("gpt2-train: error: "), std::string::npos) << result.output;
    EXPECT_NE(result.output.find("--batch-size 4"), std::string::npos) << result.output;
    EXPECT_NE(result.output.find("--batch-size 2"), std::string::npos) << result.output;
    EXPECT_EQ(read_metrics(ref + "/metrics.jsonl").size(), 8u);  // nothing was trained
  }
  fs::remove_all(dir);
}

TEST(Resume, AChangedScheduleOrUpdateIsRefusedNamingBothValues) {
  const std::string out = scratch_dir();
  const auto small_run = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {
        "--device", "cpu", "--model", "d1", "--max-seq-len", "64", "--batch-size", "1",
        "--seq-len", "16", "--steps", "4", "--lr", "3e-3", "--warmup-steps", "1",
        "--val-every", "0", "--checkpoint-every", "2", "--train-data", embedded_train_data(),
        "--out", out, "--resume"};
    args.insert(args.end(), more.begin(), more.end());
    return run_trainer(args);
  };
  const auto first = small_run({"--steps", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string state = out + "/state_00000002.bin";
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--steps", "4", "--lr", "1e-3"}, "the run has --lr 0.003, this command --lr 0.001"},
      {{"--steps", "4"}, "the run has --steps 2, this command --steps 4 (the decay"},
      {{"--steps", "2", "--warmup-steps", "0"}, "the run has --warmup-steps 1, this command"},
      {{"--steps", "2", "--lr-schedule", "linear"}, "the run has --lr-schedule cosine, this"},
      {{"--steps", "2", "--final-lr-frac", "0"}, "the run has --final-lr-frac 0.1, this"},
      {{"--steps", "2", "--weight-decay", "0"}, "the run has --weight-decay 0.1, this"},
      {{"--steps", "2", "--grad-clip", "0.5"}, "the run has --grad-clip 1, this command"},
      {{"--steps", "2", "--on-nonfinite", "skip-step"},
       "the run has --on-nonfinite stop, this command --on-nonfinite skip-step (it decides when "
       "the run stops)"},
  };
  for (const auto& c : cases) {
    const auto result = small_run(c.args);
    EXPECT_EQ(result.exit_code, 1) << c.message << "\n" << result.output;
    EXPECT_NE(result.output.find("gpt2-train: error: " + state + ": cannot resume: " + c.message),
              std::string::npos)
        << result.output;
  }
  EXPECT_EQ(read_metrics(out + "/metrics.jsonl").size(), 2u);  // nothing was trained
  // The same settings continue (here: nothing left to train).
  const auto same = small_run({"--steps", "2"});
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("nothing to train"), std::string::npos) << same.output;
  fs::remove_all(out);
}

}  // namespace
}  // namespace gpt2
