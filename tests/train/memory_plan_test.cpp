// On the CPU the memory plan a run prints (and reports as planned_mem_bytes) is within 15% of
// the measured peak (the process's max RSS): besides the model's buffers it counts what the
// process holds before allocation and the host copies of the parameters that initialization
// and checkpoints make. A plan larger than the host's available memory is refused before any
// buffer exists, naming the very total the screen shows.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "train/run_files.h"
#include "train_test_util.h"

namespace gpt2 {
namespace {

using testing::embedded_train_data;
using testing::embedded_val_data;
using testing::run_trainer;
using testing::scratch_dir;

struct PlanAndPeak {
  double planned = 0;
  double peak = 0;
  std::string output;
};

PlanAndPeak run(const std::string& out, std::vector<std::string> args) {
  std::vector<std::string> all = {"--device", "cpu", "--steps", "3", "--val-every", "0",
                                  "--train-data", embedded_train_data(),
                                  "--val-data", embedded_val_data(), "--out", out};
  all.insert(all.end(), args.begin(), args.end());
  const auto result = run_trainer(all);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  PlanAndPeak figures;
  figures.output = result.output;
  if (result.exit_code != 0) return figures;
  const Json summary = parse_json(read_file_text(summary_path(out)), "summary.json");
  figures.planned = summary.at("planned_mem_bytes").get<double>();
  figures.peak = summary.at("peak_mem_bytes").get<double>();
  return figures;
}

TEST(CpuMemoryPlan, IsWithin15PercentOfTheMeasuredPeak) {
  const std::string dir = scratch_dir();
  const std::vector<std::vector<std::string>> configs = {
      {"--model", "d1", "--max-seq-len", "64", "--batch-size", "4", "--seq-len", "32"},
      // A constant schedule, so that the resume below may run to another --steps.
      {"--model", "d1", "--max-seq-len", "64", "--batch-size", "1", "--seq-len", "8",
       "--checkpoint-every", "1", "--lr-schedule", "constant"},
      {"--model", "d1", "--max-seq-len", "64", "--batch-size", "4", "--seq-len", "32",
       "--sample-every", "2", "--sample-tokens", "4"},
      {"--model", "d2", "--max-seq-len", "128", "--batch-size", "2", "--seq-len", "128",
       "--attn", "naive", "--checkpoint-every", "2", "--val-every", "2", "--val-steps", "2"},
  };
  for (size_t i = 0; i < configs.size(); ++i) {
    std::string joined;
    for (const std::string& arg : configs[i]) joined += arg + " ";
    const std::string out = dir + "/" + std::to_string(i);
    const PlanAndPeak figures = run(out, configs[i]);
    ASSERT_GT(figures.peak, 0.0) << joined;
    EXPECT_LE(std::fabs(figures.planned - figures.peak), 0.15 * figures.peak)
        << joined << ": planned " << figures.planned << " bytes, measured peak " << figures.peak;
    EXPECT_NE(figures.output.find("  host "), std::string::npos) << figures.output;
    if (i == 1) {
      SCOPED_TRACE("resuming: the resume point's copies are resident before allocation");
      std::vector<std::string> more = configs[i];
      more.insert(more.end(), {"--steps", "5", "--resume"});
      const PlanAndPeak resumed = run(out, more);
      EXPECT_LE(std::fabs(resumed.planned - resumed.peak), 0.15 * resumed.peak)
          << "planned " << resumed.planned << " bytes, measured peak " << resumed.peak;
    }
  }
  std::filesystem::remove_all(dir);
}

// gpt2-xl at B=64, T=1024 plans far more than any test machine holds: refused with exit 1,
// the refusal's total the printed plan's.
TEST(CpuMemoryPlan, APlanThatDoesNotFitIsRefusedWithThePrintedTotal) {
  const std::string out = scratch_dir("plan_too_large");
  const auto result = run_trainer({"--device", "cpu", "--model", "gpt2-xl", "--batch-size", "64",
                                   "--seq-len", "1024", "--steps", "1", "--val-every", "0",
                                   "--train-data", embedded_train_data(), "--out", out});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  const size_t total_line = result.output.rfind("\n  total  ");  // the plan's last line
  ASSERT_NE(total_line, std::string::npos) << result.output;
  const size_t end = result.output.find('\n', total_line + 1);
  std::string total = result.output.substr(total_line + 9, end - total_line - 9);
  total.erase(0, total.find_first_not_of(' '));
  EXPECT_NE(result.output.find("not enough CPU memory: the plan above needs"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("(" + total + ") in total"), std::string::npos)
      << "printed total " << total << ":\n" << result.output;
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace gpt2
