/**
 * @file compare_runs_test.cpp
 * @brief gpt2-compare-runs end to end: two runs' metrics.jsonl (one given as its folder, one as
 * the file; a torn last line and a skipped step among them) give curves.csv with every step's
 * losses, curves.svg with both panels, and a table with the final and lowest losses relative to
 * the first run; --axis time puts them at equal training time; a bad command line exits 2, a run
 * without a readable loss (or, on the time axis, a step's time) exits 1.
 */
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "run_command.h"
#include "test_fixtures.h"

namespace gpt2 {
namespace {

using testing::CommandResult;
using testing::run_binary;

class CompareRunsTest : public testing::ScratchDirTest {
 protected:
  CompareRunsTest() : ScratchDirTest("compare_runs") {}
  void write(const std::string& file, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path(file)).parent_path());
    std::ofstream(path(file)) << text;
  }
  std::string read(const std::string& file) {
    std::ifstream in(path(file));
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  const std::string binary_ = GPT2_COMPARE_RUNS_BINARY;
};

TEST_F(CompareRunsTest, WritesCurvesAndTheTable) {
  write("a/metrics.jsonl",
        "{\"step\":1,\"loss\":4.0}\n{\"step\":2,\"loss\":3.0,\"val_loss\":3.5}\n"
        "{\"step\":3,\"loss\":2.0,\"val_loss\":3.0}\n{\"step\":4,\"lo");
  write("b.jsonl",
        "{\"step\":1,\"loss\":4.0}\n{\"step\":2,\"loss\":null,\"val_loss\":3.6}\n"
        "{\"step\":3,\"loss\":2.2,\"val_loss\":3.3}\n");
  const CommandResult run = run_binary(
      binary_, {"--run", "bf16=" + path("a"), "--run", "fp8=" + path("b.jsonl"), "--out",
                path("cmp"), "--smooth", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(read("cmp/curves.csv"),
            "step,bf16_train_loss,bf16_val_loss,fp8_train_loss,fp8_val_loss\n"
            "1,4,,4,\n2,3,3.5,,3.6\n3,2,3,2.2,3.3\n");
  const std::string figure = read("cmp/curves.svg");
  EXPECT_NE(figure.find("train loss (mean of 2 steps)"), std::string::npos);
  EXPECT_NE(figure.find("val loss"), std::string::npos);
  // Final train loss = the mean of the last 2 steps: 2.5 and 3.1; final val 3 and 3.3 (1.1x).
  EXPECT_NE(run.output.find("2.500000"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("3.100000"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("1.1"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("3 (3)"), std::string::npos) << run.output;  // lowest val, its step
  EXPECT_NE(run.output.find("val, last 5"), std::string::npos) << run.output;
  // --last 2: the mean of each run's last two val losses, 3.25 and 3.45 (1.06154x).
  const CommandResult last_two = run_binary(
      binary_, {"--run", "bf16=" + path("a"), "--run", "fp8=" + path("b.jsonl"), "--out",
                path("cmp2"), "--last", "2"});
  ASSERT_EQ(last_two.exit_code, 0) << last_two.output;
  EXPECT_NE(last_two.output.find("val, last 2"), std::string::npos) << last_two.output;
  EXPECT_NE(last_two.output.find(" 3.25 "), std::string::npos) << last_two.output;
  EXPECT_NE(last_two.output.find(" 3.45 "), std::string::npos) << last_two.output;
  EXPECT_NE(last_two.output.find("1.06154"), std::string::npos) << last_two.output;
  EXPECT_EQ(run_binary(binary_, {"--run", "bf16=" + path("a"), "--run", "fp8=" + path("b.jsonl"),
                                 "--out", path("cmp3"), "--last", "0"})
                .exit_code,
            2);
}

// --axis time: each point at the sum of its run's step times so far (seconds); the table's val
// loss at the latest time both runs reached with a validation, b's interpolated between its
// validations: a at 3 s is 3.0; b validated at 1 s (3.6) and 3.5 s (3.1), so 3.2 at 3 s.
TEST_F(CompareRunsTest, TimeAxisPutsTheRunsAtEqualTime) {
  write("a.jsonl",
        "{\"step\":1,\"loss\":4.0,\"ms\":1000}\n"
        "{\"step\":2,\"loss\":3.0,\"val_loss\":3.5,\"ms\":1000}\n"
        "{\"step\":3,\"loss\":2.0,\"val_loss\":3.0,\"ms\":1000}\n");
  write("b.jsonl",
        "{\"step\":1,\"loss\":4.0,\"val_loss\":3.6,\"ms\":1000}\n"
        "{\"step\":2,\"loss\":null,\"ms\":500}\n"
        "{\"step\":3,\"loss\":2.2,\"ms\":500}\n"
        "{\"step\":4,\"loss\":2.0,\"val_loss\":3.1,\"ms\":1500}\n");
  const CommandResult run =
      run_binary(binary_, {"--run", "a=" + path("a.jsonl"), "--run", "b=" + path("b.jsonl"),
                           "--out", path("cmp"), "--smooth", "1", "--axis", "time"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(read("cmp/curves.csv"),
            "seconds,a_train_loss,a_val_loss,b_train_loss,b_val_loss\n"
            "1,4,,4,3.6\n2,3,3.5,2.2,\n3,2,3,,\n3.5,,,2,3.1\n");
  EXPECT_NE(run.output.find("val at 3.0 s"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(" 3.2 "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("1.06667"), std::string::npos) << run.output;  // 3.2 / 3.0
  const std::string figure = read("cmp/curves.svg");
  EXPECT_NE(figure.find("training time, s"), std::string::npos);
}

TEST_F(CompareRunsTest, BadInputIsRefused) {
  write("a.jsonl", "{\"step\":1,\"loss\":4.0}\n");
  write("empty.jsonl", "{\"step\":1,\"loss\":null}\n");
  EXPECT_EQ(run_binary(binary_, {"--run", "a=" + path("a.jsonl")}).exit_code, 2);
  EXPECT_EQ(run_binary(binary_, {"--run", "a", "--run", "b=" + path("a.jsonl")}).exit_code, 2);
  EXPECT_EQ(run_binary(binary_, {"--run", "a=" + path("a.jsonl"), "--run", "b=" + path("none"),
                                 "--out", path("o")})
                .exit_code,
            1);
  const CommandResult no_loss = run_binary(
      binary_, {"--run", "a=" + path("a.jsonl"), "--run", "b=" + path("empty.jsonl"), "--out",
                path("o")});
  EXPECT_EQ(no_loss.exit_code, 1);
  EXPECT_NE(no_loss.output.find("no finite train loss"), std::string::npos) << no_loss.output;
  // --axis takes step or time; time needs every step's "ms" (a.jsonl has none).
  EXPECT_EQ(run_binary(binary_, {"--run", "a=" + path("a.jsonl"), "--run", "b=" + path("a.jsonl"),
                                 "--out", path("o"), "--axis", "tokens"})
                .exit_code,
            2);
  const CommandResult no_time =
      run_binary(binary_, {"--run", "a=" + path("a.jsonl"), "--run", "b=" + path("a.jsonl"),
                           "--out", path("o"), "--axis", "time"});
  EXPECT_EQ(no_time.exit_code, 1);
  EXPECT_NE(no_time.output.find("needs every step's time"), std::string::npos) << no_time.output;
}

}  // namespace
}  // namespace gpt2
