// A run knows who it is: a run id drawn when it starts, kept by every resume, recorded in its
// training states, in OUT/run.json and in summary.json. --resume continues the newest verified
// pair of the run that last used --out, never another run's, and says which run it continues;
// a new run refuses an --out holding an earlier run's checkpoints (exit 1, naming them) unless
// --overwrite, which removes them, so two runs never interleave in one folder.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "train/run_files.h"
#include "train_test_util.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;
using testing::BackgroundProcess;
using testing::embedded_train_data;
using testing::read_metrics;
using testing::run_trainer;
using testing::scratch_dir;
using testing::trainer_argv;

// d1 with B*T = 16 (about 30 ms a step) at a constant learning rate, so that a run may be
// stopped anywhere and continued to another --steps.
std::vector<std::string> run_args(const std::string& out, int steps,
                                  std::vector<std::string> more = {}) {
  std::vector<std::string> args = {
      "--device", "cpu", "--model", "d1", "--max-seq-len", "64", "--seq-len", "16",
      "--steps", std::to_string(steps), "--lr-schedule", "constant", "--val-every", "0",
      "--train-data", embedded_train_data(), "--out", out};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::string run_id_of(const std::string& out) {
  return parse_json(read_file_text(run_record_path(out)), "run.json").at("run_id");
}

std::string run_id_of_state(const std::string& path) {
  return format_run_id(read_training_state(path).run_id);
}

// The step N of "stopped by SIGTERM after step N of", or -1.
int stopped_after(const std::string& output) {
  std::smatch match;
  if (!std::regex_search(output, match, std::regex("stopped by SIGTERM after step ([0-9]+) of")))
    return -1;
  return std::stoi(match[1]);
}

TEST(RunIdentity, ANewRunRefusesAnOutOfCheckpointsUnlessOverwriteWhichRemovesThem) {
  const std::string out = scratch_dir();
  const auto first = run_trainer(
      run_args(out, 4, {"--batch-size", "1", "--checkpoint-every", "2", "--lr", "1e-3"}));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string first_run = run_id_of(out);
  EXPECT_NE(first.output.find("  run                " + first_run + " (new)"), std::string::npos)
      << first.output;
  EXPECT_EQ(run_id_of_state(training_state_path(out, 4)), first_run);
  EXPECT_EQ(parse_json(read_file_text(summary_path(out)), "summary").at("run_id"), first_run);

  // Another run in the same folder: refused before anything is touched.
  const std::vector<std::string> second_args =
      run_args(out, 3, {"--batch-size", "2", "--checkpoint-every", "1", "--lr", "3e-3"});
  const auto refused = run_trainer(second_args);
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_EQ(refused.output.rfind("gpt2-train: error: --out " + out + " holds the checkpoints of "
                                 "an earlier run (2 training states, state_00000002.bin to "
                                 "state_00000004.bin)",
                                 0),
            0u)
      << refused.output;
  EXPECT_NE(refused.output.find("--overwrite"), std::string::npos) << refused.output;
  EXPECT_EQ(run_id_of(out), first_run);
  EXPECT_EQ(read_metrics(metrics_path(out)).size(), 4u);
  EXPECT_TRUE(fs::exists(summary_path(out)));

  // --overwrite: the earlier run's checkpoints and summary go, the new run owns the folder.
  std::vector<std::string> overwrite = second_args;
  overwrite.push_back("--overwrite");
  const auto second = run_trainer(overwrite);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("out: removed the 4 checkpoint file(s) of the earlier run "
                               "(--overwrite)"),
            std::string::npos)
      << second.output;
  const std::string second_run = run_id_of(out);
  EXPECT_NE(second_run, first_run);
  EXPECT_FALSE(fs::exists(model_checkpoint_path(out, 4)));  // the earlier run's step 4
  for (int step = 1; step <= 3; ++step)
    EXPECT_EQ(run_id_of_state(training_state_path(out, step)), second_run) << step;
  EXPECT_EQ(read_metrics(metrics_path(out)).size(), 3u);
  fs::remove_all(out);
}

// The case: run A finished in OUT with checkpoints up to step 10; run B starts there
// (another --batch-size and --lr), is stopped by SIGTERM and told --resume continues it. Resume
// continues B from its own pair, though A's newer step-10 pair is there too (copied back in:
// B's --overwrite had removed it), and says so.
TEST(RunIdentity, ResumeContinuesTheRunThatLastUsedOutNeverAnEarlierRunsNewerPair) {
  const std::string dir = scratch_dir();
  const std::string out = dir + "/o";
  const std::string a_copy = dir + "/a";
  const auto a = run_trainer(
      run_args(out, 10, {"--batch-size", "1", "--checkpoint-every", "10", "--lr", "1e-3"}));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::string run_a = run_id_of(out);
  fs::create_directories(a_copy);
  for (const std::string& file : {model_checkpoint_path(out, 10), training_state_path(out, 10)})
    fs::copy_file(file, fs::path(a_copy) / fs::path(file).filename());

  BackgroundProcess b(trainer_argv(run_args(
      out, 100000, {"--batch-size", "2", "--checkpoint-every", "100000", "--lr", "3e-3",
                    "--overwrite"})));
  ASSERT_TRUE(b.wait_for(" 3/100000 |")) << b.output();
  ASSERT_EQ(kill(b.pid(), SIGTERM), 0);
  ASSERT_EQ(b.finish(), 128 + SIGTERM) << b.output();
  const int stopped = stopped_after(b.output());
  ASSERT_GE(stopped, 3) << b.output();
  ASSERT_LT(stopped, 10) << b.output();
  const std::string run_b = run_id_of(out);
  ASSERT_NE(run_b, run_a);
  for (const std::string& file : {model_checkpoint_path(out, 10), training_state_path(out, 10)})
    fs::copy_file(fs::path(a_copy) / fs::path(file).filename(), file);

  const auto resumed = run_trainer(run_args(
      out, stopped + 2, {"--batch-size", "2", "--checkpoint-every", "100000", "--lr", "3e-3",
                         "--resume"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resume: checkpoint of step 10 skipped: " +
                                training_state_path(out, 10) + " belongs to run " + run_a +
                                ", not to run " + run_b + ", which last used " + out),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("resume: continuing run " + run_b + " from " +
                                model_checkpoint_path(out, stopped) + " at step " +
                                std::to_string(stopped + 1)),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("  run                " + run_b + " (continued)"),
            std::string::npos)
      << resumed.output;
  const auto rows = read_metrics(metrics_path(out));
  ASSERT_EQ(rows.size(), static_cast<size_t>(stopped + 2));
  EXPECT_EQ(rows.back().at("step"), stopped + 2);
  EXPECT_EQ(run_id_of_state(training_state_path(out, stopped + 2)), run_b);
  EXPECT_EQ(parse_json(read_file_text(summary_path(out)), "summary").at("run_id"), run_b);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpt2
