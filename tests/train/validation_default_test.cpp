// Validation data by default: the embedded corpus's validation split validates only a run on
// the embedded corpus. A user's --train-data without --val-data runs without validation and
// says so on its first line (and in config.json); an explicit --val-every N > 0 there is a
// usage error; with --val-data it validates on that data.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/file_io.h"
#include "base/json.h"
#include "train/options.h"
#include "train/run_record.h"
#include "train_test_util.h"

namespace gpt2 {
namespace {

using testing::embedded_train_data;
using testing::embedded_val_data;
using testing::read_metrics;
using testing::run_trainer;
using testing::scratch_dir;

std::vector<std::string> run_args(const std::string& out, std::vector<std::string> more) {
  std::vector<std::string> args = {"--device", "cpu", "--model", "d1", "--max-seq-len", "64",
                                   "--seq-len", "16", "--batch-size", "1", "--steps", "2",
                                   "--val-steps", "1", "--out", out};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TrainConfig resolve(const std::vector<std::string>& args) {
  return resolve_train_config(parse_command_line(args), DeviceAvailability{});
}

TEST(ValidationDefault, ResolutionNeverValidatesUserDataOnTheEmbeddedCorpus) {
  const TrainConfig embedded = resolve({"--device", "cpu"});
  EXPECT_EQ(embedded.val_every, 25);
  EXPECT_NE(embedded.val_data.pattern.find("kjv_val.bin"), std::string::npos);
  EXPECT_TRUE(embedded.validation_note.empty());

  const TrainConfig user = resolve({"--device", "cpu", "--train-data", "mine.bin"});
  EXPECT_EQ(user.val_every, 0);
  EXPECT_EQ(user.val_data.pattern, "");
  EXPECT_NE(user.validation_note.find("--val-data"), std::string::npos) << user.validation_note;

  const TrainConfig user_val =
      resolve({"--device", "cpu", "--train-data", "mine.bin", "--val-data", "mine_val.bin"});
  EXPECT_EQ(user_val.val_every, 25);
  EXPECT_EQ(user_val.val_data.pattern, "mine_val.bin");
  EXPECT_TRUE(user_val.validation_note.empty());

  // Turned off by the user: nothing to say.
  EXPECT_TRUE(resolve({"--device", "cpu", "--train-data", "mine.bin", "--val-every", "0"})
                  .validation_note.empty());
  try {
    resolve({"--device", "cpu", "--train-data", "mine.bin", "--val-every", "5"});
    ADD_FAILURE() << "--val-every 5 without --val-data was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--val-every 5 needs --val-data"), std::string::npos)
        << e.what();
  }
}

TEST(ValidationDefault, AUserRunWithoutValDataSaysFirstThatItDoesNotValidate) {
  const std::string out = scratch_dir();
  const auto run = run_trainer(run_args(out, {"--train-data", embedded_train_data()}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.rfind("validation: off: --train-data is given without --val-data", 0), 0u)
      << "the first line must say it:\n" << run.output;
  EXPECT_EQ(run.output.find("val loss"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("kjv_val"), std::string::npos) << run.output;
  for (const Json& row : read_metrics(out + "/metrics.jsonl"))
    EXPECT_FALSE(row.contains("val_loss")) << dump_json(row);
  const Json config = parse_json(read_file_text(config_record_path(out)), "config.json");
  EXPECT_EQ(config.at("config").at("val_every"), 0);
  EXPECT_EQ(config.at("config").at("data").at("val_data"), "");
  EXPECT_TRUE(config.at("config").contains("validation_note"));
  std::filesystem::remove_all(out);
}

TEST(ValidationDefault, AnExplicitValEveryWithoutValDataIsAUsageError) {
  const std::string out = scratch_dir();
  const auto run =
      run_trainer(run_args(out, {"--train-data", embedded_train_data(), "--val-every", "1"}));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--val-every 1 needs --val-data"), std::string::npos) << run.output;
  EXPECT_FALSE(file_exists(out + "/metrics.jsonl"));
  std::filesystem::remove_all(out);
}

TEST(ValidationDefault, UserValDataIsValidatedOn) {
  const std::string out = scratch_dir();
  const auto run = run_trainer(run_args(out, {"--train-data", embedded_train_data(),
                                              "--val-data", embedded_val_data(),
                                              "--val-every", "1"}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.find("validation: off"), std::string::npos) << run.output;
  const std::vector<Json> rows = read_metrics(out + "/metrics.jsonl");
  ASSERT_EQ(rows.size(), 2u);
  for (const Json& row : rows) EXPECT_TRUE(row.contains("val_loss")) << dump_json(row);
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace gpt2
