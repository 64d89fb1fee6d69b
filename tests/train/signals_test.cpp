// SIGTERM and SIGINT stop a run between steps: the step in progress finishes, a checkpoint of it
// is written when checkpointing is on, the run says what it saved and exits with 128 + signal;
// the checkpoint then resumes bit for bit. A second signal exits at once.
#include "train/signals.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "train/loss_plot.h"
#include "train/run_files.h"
#include "train_test_util.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;
using testing::BackgroundProcess;
using testing::trainer_argv;
using testing::embedded_train_data;
using testing::read_metrics;
using testing::run_trainer;
using testing::scratch_dir;

// d1 with B*T = 16 at a constant learning rate, so that a run's first N steps do not depend on
// --steps: the interrupted run can ask for 100000 steps and its continuation for a few.
std::vector<std::string> run_args(const std::string& out, int steps,
                                  std::vector<std::string> more = {}) {
  std::vector<std::string> args = {
      "--device", "cpu", "--model", "d1", "--max-seq-len", "64", "--batch-size", "1",
      "--seq-len", "16", "--steps", std::to_string(steps), "--lr", "3e-3", "--lr-schedule",
      "constant", "--val-every", "0", "--train-data", embedded_train_data(), "--out", out};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The step N of "stopped by <signal> after step N of", or -1.
int stopped_after(const std::string& output, const std::string& signal) {
  std::smatch match;
  const std::regex pattern("stopped by " + signal + " after step ([0-9]+) of");
  if (!std::regex_search(output, match, pattern)) return -1;
  return std::stoi(match[1]);
}

TEST(Signals, SigtermMidRunLeavesACheckpointThatResumesBitForBit) {
  const std::string dir = scratch_dir();
  const std::string out = dir + "/interrupted";
  // --checkpoint-every beyond the run: the only checkpoint is the one SIGTERM asks for.
  BackgroundProcess run(trainer_argv(run_args(out, 100000, {"--checkpoint-every", "100000"})));
  ASSERT_TRUE(run.wait_for(" 3/100000 |")) << run.output();
  ASSERT_EQ(kill(run.pid(), SIGTERM), 0);
  EXPECT_EQ(run.finish(), 128 + SIGTERM) << run.output();
  const std::string& log = run.output();
  EXPECT_NE(log.find("gpt2-train: SIGTERM: stopping after the current step"), std::string::npos)
      << log;
  const int stopped = stopped_after(log, "SIGTERM");
  ASSERT_GE(stopped, 3) << log;
  EXPECT_NE(log.find("saved " + model_checkpoint_path(out, stopped) + " and " +
                     training_state_path(out, stopped)),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find(" " + std::to_string(stopped + 1) + "/100000 |"), std::string::npos) << log;
  ASSERT_EQ(read_metrics(metrics_path(out)).size(), static_cast<size_t>(stopped));

  // The same run uninterrupted, and the interrupted one continued, for 3 more steps.
  const int steps = stopped + 3;
  const auto reference = run_trainer(run_args(dir + "/reference", steps));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto resumed = run_trainer(run_args(out, steps, {"--resume"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step " + std::to_string(stopped + 1)), std::string::npos)
      << resumed.output;
  const std::vector<Json> expected = read_metrics(metrics_path(dir + "/reference"));
  const std::vector<Json> got = read_metrics(metrics_path(out));
  ASSERT_EQ(expected.size(), static_cast<size_t>(steps));
  ASSERT_EQ(got.size(), static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    for (const char* key : {"step", "loss", "lr", "grad_norm"})
      EXPECT_EQ(got[i].at(key), expected[i].at(key)) << key << " at step " << i + 1;
  }
  fs::remove_all(dir);
}

// Without periodic checkpoints a stopped run still leaves its final pair (--save-final, on by
// default) and its loss curves (loss.svg; this run does not validate, so no earlier plot), and
// says where; with --save-final 0 it says that nothing was saved.
TEST(Signals, SigintSavesTheFinalPairUnlessToldNot) {
  for (const bool save_final : {true, false}) {
    SCOPED_TRACE(save_final ? "--save-final 1" : "--save-final 0");
    const std::string out = scratch_dir();
    std::vector<std::string> args = run_args(out, 100000);
    args.insert(args.end(), {"--save-final", save_final ? "1" : "0"});
    BackgroundProcess run(trainer_argv(args));
    ASSERT_TRUE(run.wait_for(" 2/100000 |")) << run.output();
    ASSERT_EQ(kill(run.pid(), SIGINT), 0);
    EXPECT_EQ(run.finish(), 128 + SIGINT) << run.output();
    const int stopped = stopped_after(run.output(), "SIGINT");
    ASSERT_GE(stopped, 2) << run.output();
    EXPECT_EQ(read_metrics(metrics_path(out)).size(), static_cast<size_t>(stopped));
    EXPECT_EQ(fs::exists(model_checkpoint_path(out, stopped)), save_final);
    EXPECT_EQ(fs::exists(training_state_path(out, stopped)), save_final);
    EXPECT_EQ(fs::exists(loss_plot_path(out)), save_final);
    const std::string said =
        save_final ? "saved " + model_checkpoint_path(out, stopped)
                   : std::string("no checkpoint saved (--save-final 0 and --checkpoint-every 0)");
    EXPECT_NE(run.output().find(said), std::string::npos) << run.output();
    fs::remove_all(out);
  }
}

TEST(SignalsDeathTest, ASecondSignalExitsAtOnce) {
  EXPECT_EXIT(
      {
        const StopSignals signals;
        std::raise(SIGTERM);
        if (StopSignals::received() != SIGTERM) _exit(1);  // the first one is only recorded
        std::raise(SIGINT);
        _exit(2);  // not reached
      },
      ::testing::ExitedWithCode(128 + SIGINT), "second signal \\(SIGINT\\): exiting at once");
}

TEST(Signals, HandlersAreRestoredAfterwards) {
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &before), 0);
  {
    const StopSignals signals;
    EXPECT_EQ(StopSignals::received(), 0);
  }
  struct sigaction after {};
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
  EXPECT_STREQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_STREQ(signal_name(SIGINT), "SIGINT");
}

}  // namespace
}  // namespace gpt2
