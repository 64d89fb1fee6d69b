// --resume continues a run bit for bit: steps 5..8 after resuming from step 4's checkpoint
// write the same losses, norms, learning rates, validation losses and samples as the
// uninterrupted run. A model file without its state file is skipped for the previous
// complete pair, and a checkpoint from other settings is refused with both values named.
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

}  // namespace
}  // namespace gpt2
