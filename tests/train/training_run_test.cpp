// Short CPU runs of gpt2-train on the embedded data: the loss goes down with either attention
// and both attentions give the same losses; metrics.jsonl and summary.json hold what the
// README promises. Runs use d1 with B*T = 128 so each step takes a fraction of a second.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "base/json.h"
#include "data/shard.h"
#include "train/run_files.h"
#include "train_test_util.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;
using testing::embedded_train_data;
using testing::embedded_val_data;
using testing::read_metrics;
using testing::run_trainer;
using testing::scratch_dir;

std::vector<std::string> tiny_run(const std::string& out, int steps, const char* lr = "3e-3") {
  return {"--device", "cpu", "--model", "d1", "--max-seq-len", "64", "--batch-size", "4",
          "--seq-len", "32", "--steps", std::to_string(steps), "--lr", lr,
          "--train-data", embedded_train_data(), "--val-data", embedded_val_data(),
          "--out", out};
}

std::vector<std::string> with(std::vector<std::string> args,
                              const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::vector<double> losses(const std::vector<Json>& rows) {
  std::vector<double> out;
  for (const auto& row : rows) out.push_back(row.at("loss").get<double>());
  return out;
}

TEST(TrainingRun, LossDecreasesAndNaiveMatchesFlash) {
  const std::string dir = scratch_dir();
  constexpr int kSteps = 12;
  std::vector<std::vector<double>> runs;
  for (const char* attn : {"naive", "flash"}) {
    const std::string out = dir + "/" + attn;
    const auto result =
        run_trainer(with(tiny_run(out, kSteps, "1e-2"), {"--attn", attn, "--val-every", "0"}));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const auto rows = read_metrics(out + "/metrics.jsonl");
    ASSERT_EQ(rows.size(), size_t{kSteps});
    for (const auto& row : rows) EXPECT_EQ(row.at("attn"), attn);
    runs.push_back(losses(rows));
    const auto& loss = runs.back();
    const double last3 = (loss[kSteps - 1] + loss[kSteps - 2] + loss[kSteps - 3]) / 3.0;
    // ln(50257) = 10.8 at init; a dozen steps at lr 1e-2 learn much of the unigram statistics
    // (about 3.5 nats lower at the end).
    EXPECT_NEAR(loss[0], std::log(50257.0), 0.5) << attn;
    EXPECT_LT(last3, loss[0] - 2.0) << attn << ": first " << loss[0] << ", last three " << last3;
  }
  for (int i = 0; i < kSteps; ++i)
    EXPECT_NEAR(runs[0][i], runs[1][i], 1e-4 * std::fabs(runs[0][i])) << "step " << i + 1;
  std::filesystem::remove_all(dir);
}

// A run without periodic checkpoints leaves its weights: the final pair, and the line that names
// it; gpt2-generate can load that model file.
TEST(TrainingRun, TheFinalModelIsSavedByDefault) {
  const std::string out = scratch_dir();
  const auto result = run_trainer(with(tiny_run(out, 2), {"--val-every", "0"}));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(fs::exists(model_checkpoint_path(out, 2))) << result.output;
  EXPECT_TRUE(fs::exists(training_state_path(out, 2))) << result.output;
  EXPECT_NE(result.output.find(model_checkpoint_path(out, 2)), std::string::npos)
      << result.output;
  EXPECT_FALSE(fs::exists(model_checkpoint_path(out, 1)));  // no periodic ones
  const std::string off = scratch_dir();
  const auto none =
      run_trainer(with(tiny_run(off, 2), {"--val-every", "0", "--save-final", "0"}));
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_FALSE(fs::exists(model_checkpoint_path(off, 2)));
  fs::remove_all(out);
  fs::remove_all(off);
}

TEST(TrainingRun, MetricsAndSummaryFiles) {
  const std::string dir = scratch_dir();
  // A validation shard with exactly 2 batches of B=4 T=32: (300 - 1) / 32 = 9 windows.
  std::vector<uint16_t> val_tokens(300);
  for (size_t i = 0; i < val_tokens.size(); ++i) val_tokens[i] = static_cast<uint16_t>(i * 31 % 1000);
  write_shard(dir + "/val.bin", val_tokens);
  const std::string out = dir + "/nested/out";  // does not exist yet
  const auto result = run_trainer(with(
      tiny_run(out, 5),
      {"--val-data", dir + "/val.bin", "--val-every", "2", "--val-steps", "5",
       "--total-batch-size", "256", "--sample-every", "2", "--sample-tokens", "6", "--resume"}));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::string& log = result.output;
  EXPECT_NE(log.find("no complete checkpoint"), std::string::npos) << log;
  EXPECT_NE(log.find("memory plan"), std::string::npos) << log;
  EXPECT_LT(log.find("memory plan"), log.find("step 1/5")) << log;
  EXPECT_NE(log.find("2 grad accumulation step(s)"), std::string::npos) << log;
  EXPECT_NE(log.find("sample at step 2:"), std::string::npos) << log;
  EXPECT_NE(log.find("sample at step 4:"), std::string::npos) << log;
  EXPECT_EQ(log.find("sample at step 5:"), std::string::npos) << log;
  // The cap of --val-steps to the 2 available batches is announced once.
  const size_t cap = log.find("using 2 instead of --val-steps 5");
  ASSERT_NE(cap, std::string::npos) << log;
  EXPECT_EQ(log.find("using 2 instead of --val-steps 5", cap + 1), std::string::npos) << log;

  const auto rows = read_metrics(out + "/metrics.jsonl");
  ASSERT_EQ(rows.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    const auto& row = rows[i];
    EXPECT_EQ(row.at("step"), i + 1);
    for (const char* key : {"loss", "lr", "grad_norm", "ms", "tokens_per_s", "peak_mem_bytes"})
      EXPECT_GT(row.at(key).get<double>(), 0.0) << key << " at step " << i + 1;
    EXPECT_EQ(row.at("attn"), "flash");
    EXPECT_EQ(row.at("device"), "cpu");
    EXPECT_EQ(row.at("precision"), "fp32");
    EXPECT_EQ(row.at("micro_batches"), 2);
    // Validation every 2 steps and at the last one: steps 2, 4 and 5.
    const bool validated = (i + 1) % 2 == 0 || i + 1 == 5;
    EXPECT_EQ(row.count("val_loss"), validated ? 1u : 0u) << "step " << i + 1;
  }

  const std::string summary_text = read_file_text(out + "/summary.json");
  const Json summary = parse_json(summary_text, "summary.json");
  EXPECT_EQ(summary_text.back(), '\n');
  EXPECT_EQ(summary.at("steps"), 5);
  EXPECT_EQ(summary.at("warmup_steps_excluded"), 3);
  EXPECT_GT(summary.at("tokens_per_s").get<double>(), 0.0);
  EXPECT_GT(summary.at("peak_mem_bytes").get<double>(), 0.0);
  EXPECT_EQ(summary.at("final_train_loss"), rows[4].at("loss"));
  EXPECT_EQ(summary.at("final_val_loss"), rows[4].at("val_loss"));
  EXPECT_EQ(summary.at("device"), "cpu");
  EXPECT_EQ(summary.count("mfu"), 0u);  // CPU: no MFU
  std::filesystem::remove_all(dir);
}

TEST(TrainingRun, AFailedMetricsWriteNamesTheReasonAndLeavesNoPartialLine) {
  // A 2 KiB file size limit (ulimit -f counts 512-byte blocks in sh, 1 KiB ones in bash; either
  // way a few lines) makes the kernel refuse an append partway through a line, like a full disk.
  const std::string out = scratch_dir();
  std::vector<std::string> args = tiny_run(out, 40);
  args.insert(args.end(), {"--batch-size", "1", "--seq-len", "16", "--val-every", "0"});
  const auto result = run_trainer(args, "ulimit -f 4;");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("gpt2-train: error: " + out + "/metrics.jsonl: cannot append the "
                               "metrics of step "),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("File too large"), std::string::npos) << result.output;
  const std::string text = read_file_text(out + "/metrics.jsonl");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const auto rows = read_metrics(out + "/metrics.jsonl");  // every line parses
  ASSERT_GE(rows.size(), 2u);
  EXPECT_EQ(rows.back().at("step"), static_cast<int>(rows.size()));
  // The step that failed is the one after the last line kept.
  EXPECT_NE(result.output.find("metrics of step " + std::to_string(rows.size() + 1) + " "),
            std::string::npos)
      << result.output;
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace gpt2
