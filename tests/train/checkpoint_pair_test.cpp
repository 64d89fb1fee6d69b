// Every checkpoint pair is tied and checked on --resume: the state records the name, size and
// hash of its model file, so a flipped byte in a model file, or a model file from another run
// next to this run's state, makes resume skip that pair (saying why) and fall back to the newest
// pair that verifies, from which the run continues bit for bit. When no pair verifies, resume
// refuses to start over on top of them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "train/run_files.h"
#include "train_test_util.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;
using testing::embedded_train_data;
using testing::read_metrics;
using testing::run_trainer;
using testing::scratch_dir;

// d1 with B*T = 16 (about 30 ms a step), checkpoints at steps 4 and 8.
std::vector<std::string> run_args(const std::string& out, const char* lr = "3e-3") {
  return {"--device", "cpu", "--model", "d1", "--max-seq-len", "64", "--batch-size", "1",
          "--seq-len", "16", "--steps", "8", "--lr", lr, "--val-every", "0",
          "--checkpoint-every", "4", "--train-data", embedded_train_data(), "--out", out,
          "--resume"};
}

void copy_pair_file(const std::string& from, const std::string& to, const std::string& name) {
  fs::create_directories(to);
  fs::copy_file(fs::path(from) / name, fs::path(to) / name, fs::copy_options::overwrite_existing);
}

void flip_byte(const std::string& path, std::streamoff offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(offset);
  char byte = 0;
  file.read(&byte, 1);
  byte ^= 0x01;
  file.seekp(offset);
  file.write(&byte, 1);
}

// Steps 5..8 of a resumed run carry exactly the reference's losses and norms.
void expect_steps_5_to_8_as_reference(const std::string& out, const std::vector<Json>& reference) {
  const auto rows = read_metrics(metrics_path(out));
  ASSERT_EQ(rows.size(), 4u);
  for (const Json& row : rows) {
    const int step = row.at("step").get<int>();
    ASSERT_TRUE(step >= 5 && step <= 8) << step;
    EXPECT_EQ(row.at("loss"), reference[step - 1].at("loss")) << "step " << step;
    EXPECT_EQ(row.at("grad_norm"), reference[step - 1].at("grad_norm")) << "step " << step;
  }
}

TEST(CheckpointPairs, AFlippedByteOrAMixedPairIsSkippedOnResume) {
  const std::string dir = scratch_dir();
  const std::string ref = dir + "/ref";
  const auto reference = run_trainer(run_args(ref));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::vector<Json> ref_rows = read_metrics(metrics_path(ref));
  ASSERT_EQ(ref_rows.size(), 8u);
  const std::string model4 = "model_00000004.bin", state4 = "state_00000004.bin";
  const std::string model8 = "model_00000008.bin", state8 = "state_00000008.bin";

  {
    SCOPED_TRACE("one flipped byte in the newest model file's parameters");
    const std::string out = dir + "/flipped";
    for (const std::string& name : {model4, state4, model8, state8})
      copy_pair_file(ref, out, name);
    flip_byte(out + "/" + model8, 1024 + 4 * 1000 + 2);
    const auto result = run_trainer(run_args(out));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("resume: checkpoint of step 8 skipped: " + out + "/" + model8),
              std::string::npos)
        << result.output;
    EXPECT_NE(result.output.find("corrupted or was written by another run"), std::string::npos)
        << result.output;
    EXPECT_NE(result.output.find("at step 5"), std::string::npos) << result.output;
    expect_steps_5_to_8_as_reference(out, ref_rows);
  }
  {
    SCOPED_TRACE("this run's state next to another run's model file");
    const std::string other = dir + "/other";
    const auto other_run = run_trainer(run_args(other, "1e-3"));
    ASSERT_EQ(other_run.exit_code, 0) << other_run.output;
    const std::string out = dir + "/mixed";
    for (const std::string& name : {model4, state4, state8}) copy_pair_file(ref, out, name);
    copy_pair_file(other, out, model8);
    const auto result = run_trainer(run_args(out));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("resume: checkpoint of step 8 skipped: "), std::string::npos)
        << result.output;
    EXPECT_NE(result.output.find("at step 5"), std::string::npos) << result.output;
    expect_steps_5_to_8_as_reference(out, ref_rows);
  }
  {
    SCOPED_TRACE("a state that names another model file");
    const std::string out = dir + "/renamed";
    copy_pair_file(ref, out, model4);
    copy_pair_file(ref, out, state4);
    fs::copy_file(fs::path(ref) / state8, fs::path(out) / state4,
                  fs::copy_options::overwrite_existing);  // step 8's state posing as step 4's
    const auto result = run_trainer(run_args(out));
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_NE(result.output.find("records step 8, not 4"), std::string::npos) << result.output;
  }
  {
    SCOPED_TRACE("no pair verifies: resume refuses to start over on top of them");
    const std::string out = dir + "/none";
    copy_pair_file(ref, out, model4);
    copy_pair_file(ref, out, state4);
    fs::copy_file(fs::path(ref) / "metrics.jsonl", fs::path(out) / "metrics.jsonl");
    flip_byte(out + "/" + state4, 2048 + 10);
    const auto result = run_trainer(run_args(out));
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_NE(result.output.find("hash mismatch"), std::string::npos) << result.output;
    EXPECT_NE(result.output.find("gpt2-train: error: --resume: none of the 1 checkpoint(s)"),
              std::string::npos)
        << result.output;
    EXPECT_EQ(read_metrics(metrics_path(out)).size(), 8u);  // untouched
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpt2
