// One run per --out: the folder is locked for the run's life, and a second run on it exits 1
// at once naming the holder's pid. Holding the lock, a run removes the temporary files of dead
// writers of its own files (never a user's file that merely looks like one), and
// --keep-checkpoints keeps only the newest pairs.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "train/run_files.h"
#include "train_test_util.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;
using testing::embedded_train_data;
using testing::run_trainer;
using testing::scratch_dir;

std::vector<std::string> run_args(const std::string& out, int steps,
                                  std::vector<std::string> more = {}) {
  std::vector<std::string> args = {
      "--device", "cpu", "--model", "d1", "--max-seq-len", "64", "--batch-size", "1",
      "--seq-len", "16", "--steps", std::to_string(steps), "--val-every", "0",
      "--train-data", embedded_train_data(), "--out", out};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

// A pid that was just used and is no longer running.
pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

TEST(RunDir, ASecondRunOnALockedOutIsRefusedNamingTheHolder) {
  const std::string out = scratch_dir();
  {
    RunDirLock held(out);  // this test process plays the first run
    const auto result = run_trainer(run_args(out, 2));
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_EQ(result.output.rfind("gpt2-train: error: " + out + " is in use by another "
                                  "gpt2-train (pid " + std::to_string(getpid()) + ",", 0),
              0u)
        << result.output;
    EXPECT_FALSE(fs::exists(metrics_path(out)));  // it touched nothing
    // A second holder in this very process is refused as well.
    try {
      RunDirLock again(out);
      ADD_FAILURE() << "locked twice";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(getpid())), std::string::npos)
          << e.what();
    }
  }
  // Released: the next run goes ahead, and releases the lock when it ends.
  const auto result = run_trainer(run_args(out, 2));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NO_THROW(RunDirLock after(out));
  fs::remove_all(out);
}

TEST(RunDir, StaleTemporariesOfDeadWritersAreRemovedAtStart) {
  const std::string out = scratch_dir();
  const std::string dead = std::to_string(dead_pid());
  const std::string alive = std::to_string(getpid());
  for (const std::string& name : std::vector<std::string>{
           "model_00000004.bin.tmp." + dead, "metrics.jsonl.tmp." + dead,
        "summary.json.tmp." + alive, "notes.tmp.txt", "my.tmp.data"})
    std::ofstream(out + "/" + name) << "x";
  const auto result = run_trainer(run_args(out, 1));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("out: removed model_00000004.bin.tmp." + dead), std::string::npos)
      << result.output;
  const std::set<std::string> names = names_in(out);
  EXPECT_EQ(names.count("model_00000004.bin.tmp." + dead), 0u);
  EXPECT_EQ(names.count("metrics.jsonl.tmp." + dead), 0u);
  EXPECT_EQ(names.count("summary.json.tmp." + alive), 1u);  // its writer is still running
  EXPECT_EQ(names.count("notes.tmp.txt"), 1u);
  EXPECT_EQ(names.count("my.tmp.data"), 1u);
  fs::remove_all(out);
}

TEST(RunDir, OnlyTemporariesOfTheRunsOwnFilesAreRemoved) {
  const std::string out = scratch_dir();
  const std::string dead = std::to_string(dead_pid());
  const std::vector<std::string> users = {"notes.tmp.20240101", "data.csv.tmp." + dead,
                                          "model_final.bin.tmp." + dead,
                                          "run.json.bak.tmp." + dead};
  const std::vector<std::string> runs = {"run.json.tmp." + dead, "summary.json.tmp." + dead,
                                         "state_00000002.bin.tmp." + dead};
  for (const std::vector<std::string>* names : {&users, &runs})
    for (const std::string& name : *names) std::ofstream(out + "/" + name) << "x";
  const auto result = run_trainer(run_args(out, 1));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::set<std::string> names = names_in(out);
  for (const std::string& name : users) EXPECT_EQ(names.count(name), 1u) << name;
  for (const std::string& name : runs) EXPECT_EQ(names.count(name), 0u) << name;
  EXPECT_FALSE(is_run_file_name("notes"));
  EXPECT_TRUE(is_run_file_name("model_00000012.bin"));
  fs::remove_all(out);
}

TEST(RunDir, KeepCheckpointsKeepsTheNewestPairs) {
  const std::string dir = scratch_dir();
  const auto pairs_in = [](const std::string& out) {
    std::vector<int> steps;
    for (int step = 1; step <= 99; ++step) {
      const bool model = fs::exists(model_checkpoint_path(out, step));
      const bool state = fs::exists(training_state_path(out, step));
      EXPECT_EQ(model, state) << out << " step " << step;
      if (model) steps.push_back(step);
    }
    return steps;
  };
  {
    SCOPED_TRACE("--keep-checkpoints 2");
    const std::string out = dir + "/two";
    const auto result =
        run_trainer(run_args(out, 5, {"--checkpoint-every", "1", "--keep-checkpoints", "2"}));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_EQ(pairs_in(out), (std::vector<int>{4, 5}));
    EXPECT_NE(result.output.find("removed the files of step 3 (--keep-checkpoints 2)"),
              std::string::npos)
        << result.output;
  }
  {
    SCOPED_TRACE("the default keeps 3; files of later steps are left alone");
    const std::string out = dir + "/default";
    fs::create_directories(out);
    std::ofstream(model_checkpoint_path(out, 99)) << "x";  // a later step, from another try
    const auto result = run_trainer(run_args(out, 5, {"--checkpoint-every", "1"}));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_TRUE(fs::exists(model_checkpoint_path(out, 99)));
    fs::remove(model_checkpoint_path(out, 99));
    EXPECT_EQ(pairs_in(out), (std::vector<int>{3, 4, 5}));
  }
  {
    SCOPED_TRACE("--keep-checkpoints 0 keeps all");
    const std::string out = dir + "/all";
    const auto result =
        run_trainer(run_args(out, 4, {"--checkpoint-every", "1", "--keep-checkpoints", "0"}));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_EQ(pairs_in(out), (std::vector<int>{1, 2, 3, 4}));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpt2
