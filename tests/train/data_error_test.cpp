// Bad training data fails the run before it writes anything: exit code 1, one line
// "gpt2-train: error: <file or pattern>: <problem>", and no --out folder or metrics file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/shard.h"
#include "train_test_util.h"

namespace gpt2 {
namespace {

using testing::run_trainer;
using testing::scratch_dir;

std::vector<std::string> run_args(const std::string& train, const std::string& val,
                                  const std::string& out) {
  return {"--device", "cpu", "--model", "d1", "--max-seq-len", "64", "--batch-size", "2",
          "--seq-len", "16", "--steps", "2", "--val-every", "1", "--val-steps", "1",
          "--train-data", train, "--val-data", val, "--out", out};
}

void expect_data_error(const std::vector<std::string>& args, const std::string& out,
                       const std::string& named) {
  const auto result = run_trainer(args);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(result.output.rfind("gpt2-train: error: ", 0), 0u) << result.output;
  EXPECT_EQ(result.output.find('\n'), result.output.size() - 1) << result.output;
  EXPECT_NE(result.output.find(named), std::string::npos) << named << "\n" << result.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/metrics.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(out));
}

// A valid shard of `tokens` small token ids.
std::string write_small_shard(const std::string& path, size_t tokens) {
  std::vector<uint16_t> ids(tokens);
  for (size_t i = 0; i < tokens; ++i) ids[i] = static_cast<uint16_t>((i * 7919) % 50257);
  write_shard(path, ids);
  return path;
}

TEST(TrainDataErrors, GlobWithoutMatchNamesThePattern) {
  const std::string dir = scratch_dir();
  const std::string val = write_small_shard(dir + "/val.bin", 200);
  const std::string pattern = dir + "/no_such_shard_*.bin";
  expect_data_error(run_args(pattern, val, dir + "/out"), dir + "/out", pattern);
  std::filesystem::remove_all(dir);
}

TEST(TrainDataErrors, CorruptShardNamesTheFile) {
  const std::string dir = scratch_dir();
  const std::string good = write_small_shard(dir + "/good.bin", 200);
  const std::string garbage = dir + "/garbage.bin";
  {
    std::ofstream out(garbage, std::ios::binary);
    const std::string bytes(2048, '\x5a');  // no shard magic
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  expect_data_error(run_args(garbage, good, dir + "/out"), dir + "/out", garbage);

  // A shard cut short: its header promises more tokens than the file holds.
  const std::string truncated = write_small_shard(dir + "/truncated.bin", 400);
  std::filesystem::resize_file(truncated, std::filesystem::file_size(truncated) - 100);
  expect_data_error(run_args(truncated, good, dir + "/out"), dir + "/out", truncated);
  // A token id outside the vocabulary, found when the first shard's tokens are read.
  std::vector<uint16_t> ids(300, 11);
  ids[123] = 60000;
  const std::string bad_token = dir + "/bad_token.bin";
  write_shard(bad_token, ids);
  expect_data_error(run_args(bad_token, good, dir + "/out"), dir + "/out", bad_token);
  // The validation data is checked just as early.
  expect_data_error(run_args(good, truncated, dir + "/out"), dir + "/out", truncated);
  std::filesystem::remove_all(dir);
}

TEST(TrainDataErrors, MissingTokenizerFailsBeforeTrainingWhenSampling) {
  const std::string dir = scratch_dir();
  const std::string good = write_small_shard(dir + "/good.bin", 200);
  std::vector<std::string> args = run_args(good, good, dir + "/out");
  args.insert(args.end(), {"--sample-every", "1"});
  // GPT2_DATA_DIR moves the tokenizer folder to dir/tokenizer, which does not exist.
  const auto result = run_trainer(args, "GPT2_DATA_DIR=" + testing::shell_quote(dir));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(result.output.rfind("gpt2-train: error: " + dir + "/tokenizer/", 0), 0u)
      << result.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out"));
  // Without sampling the tokenizer is not needed and the same run succeeds.
  const auto plain = run_trainer(run_args(good, good, dir + "/out"), "GPT2_DATA_DIR=" + dir);
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpt2
