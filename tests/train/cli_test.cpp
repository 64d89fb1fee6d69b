// The real gpt2-train binary's command line: every bad value exits with code 2 and a one-line
// "gpt2-train: error: ..." naming the option and the value; --help exits 0. None of these runs
// reaches the data or the model, so each takes milliseconds.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model.h"
#include "model/parameters.h"
#include "train/run_files.h"
#include "train_test_util.h"

namespace gpt2 {
namespace {

using testing::run_trainer;

// Options that keep a run tiny if a check were ever to let it through.
std::vector<std::string> tiny(std::vector<std::string> args) {
  std::vector<std::string> all = {"--device", "cpu", "--model", "d1", "--max-seq-len", "64",
                                  "--seq-len", "16", "--batch-size", "1", "--steps", "1",
                                  "--train-data", "/nonexistent/train_*.bin"};
  all.insert(all.end(), args.begin(), args.end());
  return all;
}

void expect_usage_error(const std::vector<std::string>& args,
                        const std::vector<std::string>& expected_parts) {
  const auto result = run_trainer(tiny(args));
  std::string joined;
  for (const auto& a : args) joined += a + " ";
  EXPECT_EQ(result.exit_code, 2) << joined << "\n" << result.output;
  EXPECT_EQ(result.output.rfind("gpt2-train: error: ", 0), 0u) << joined << "\n" << result.output;
  // One line: the message and its newline, nothing else.
  EXPECT_EQ(result.output.find('\n'), result.output.size() - 1) << joined << "\n" << result.output;
  for (const auto& part : expected_parts)
    EXPECT_NE(result.output.find(part), std::string::npos)
        << "'" << part << "' missing for " << joined << "\n" << result.output;
}

TEST(TrainCli, HelpExitsZeroAndListsTheOptions) {
  const auto short_flag = run_trainer({"-h"});
  EXPECT_EQ(short_flag.exit_code, 0) << short_flag.output;
  const auto result = run_trainer({"--help"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(short_flag.output, result.output);
  for (const char* option : {"--train-data", "--val-data", "--model", "--max-seq-len", "--device",
                             "--attn", "--precision", "--batch-size", "--seq-len",
                             "--total-batch-size", "--steps", "--lr", "--warmup-steps",
                             "--lr-schedule", "--final-lr-frac", "--weight-decay", "--grad-clip",
                             "--val-every", "--val-steps", "--sample-every", "--sample-tokens",
                             "--out", "--checkpoint-every", "--keep-checkpoints", "--resume",
                             "--on-nonfinite", "--seed"})
    EXPECT_NE(result.output.find(option), std::string::npos) << option;
}

TEST(TrainCli, NonPositiveSizesExitTwo) {
  expect_usage_error({"--batch-size", "0"}, {"--batch-size", "'0'"});
  expect_usage_error({"--batch-size", "-4"}, {"--batch-size", "'-4'"});
  expect_usage_error({"--seq-len", "0"}, {"--seq-len", "'0'"});
  expect_usage_error({"--steps", "0"}, {"--steps", "'0'"});
  expect_usage_error({"--steps", "-2"}, {"--steps", "'-2'"});
  expect_usage_error({"--total-batch-size", "-16"}, {"--total-batch-size", "'-16'"});
  expect_usage_error({"--max-seq-len", "0"}, {"--max-seq-len", "'0'"});
  expect_usage_error({"--sample-tokens", "0"}, {"--sample-tokens", "'0'"});
  expect_usage_error({"--val-every", "-1"}, {"--val-every", "'-1'"});
  expect_usage_error({"--checkpoint-every", "-5"}, {"--checkpoint-every", "'-5'"});
  expect_usage_error({"--warmup-steps", "-1"}, {"--warmup-steps", "'-1'"});
}

TEST(TrainCli, ValuesBeyondTheTypeSayOutOfRange) {
  expect_usage_error({"--steps", "99999999999"},
                     {"--steps is out of range: at most 2147483647", "'99999999999'"});
  expect_usage_error({"--batch-size", "2147483648"}, {"--batch-size is out of range"});
  expect_usage_error({"--seed", "99999999999999999999999"},
                     {"--seed is out of range: at most 9223372036854775807"});
  expect_usage_error({"--total-batch-size", "99999999999999999999999"},
                     {"--total-batch-size is out of range"});
  expect_usage_error({"--lr", "1e39"}, {"--lr is out of range", "'1e39'"});
  // Below the range is still "must be ...": the sign, not the size, is wrong.
  expect_usage_error({"--steps", "-99999999999"}, {"--steps must be a positive integer"});
  expect_usage_error({"--steps", "-99999999999999999999999"},
                     {"--steps must be a positive integer"});
}

TEST(TrainCli, AMissingModelFileIsAMissingFileNotAnUnknownName) {
  for (const std::string model : {"/nonexistent/dir/gpt2_124M.bin", "no_such_model.bin",
                                  "runs/model_00000004.bin"}) {
    const auto result = run_trainer(tiny({"--model", model}));
    EXPECT_EQ(result.exit_code, 1) << model << "\n" << result.output;
    EXPECT_EQ(result.output.rfind("gpt2-train: error: --model " + model + ": no such file", 0), 0u)
        << result.output;
  }
}

TEST(TrainCli, NonNumericValuesExitTwo) {
  expect_usage_error({"--batch-size", "four"}, {"--batch-size", "'four'"});
  expect_usage_error({"--seq-len", "64k"}, {"--seq-len", "'64k'"});
  expect_usage_error({"--steps", "1.5"}, {"--steps", "'1.5'"});
  expect_usage_error({"--lr", "abc"}, {"--lr", "'abc'"});
  expect_usage_error({"--seed", "x1"}, {"--seed", "'x1'"});
  expect_usage_error({"--grad-clip", ""}, {"--grad-clip", "''"});
}

TEST(TrainCli, UnknownNamesExitTwo) {
  expect_usage_error({"--attn", "linear"}, {"--attn", "'linear'"});
  expect_usage_error({"--device", "tpu"}, {"--device", "'tpu'"});
  expect_usage_error({"--precision", "fp16"}, {"--precision", "'fp16'"});
  expect_usage_error({"--lr-schedule", "step"}, {"--lr-schedule", "'step'"});
  expect_usage_error({"--model", "d0"}, {"model", "'d0'"});
  expect_usage_error({"--model", "gpt3"}, {"model", "'gpt3'"});
  expect_usage_error({"--frobnicate", "1"}, {"unknown option", "--frobnicate"});
  expect_usage_error({"extra"}, {"'extra'"});
}

TEST(TrainCli, InconsistentValuesExitTwo) {
  // --seq-len above the model's context names both numbers.
  expect_usage_error({"--seq-len", "128"}, {"--seq-len 128", "64"});
  // 1 * 16 * 1 = 16 tokens per micro-batch; 40 is not a multiple.
  expect_usage_error({"--total-batch-size", "40"}, {"--total-batch-size 40", "16"});
  expect_usage_error({"--final-lr-frac", "1.01"}, {"--final-lr-frac", "'1.01'"});
  expect_usage_error({"--final-lr-frac", "-0.5"}, {"--final-lr-frac", "'-0.5'"});
  expect_usage_error({"--lr", "-0.001"}, {"--lr", "'-0.001'"});
  expect_usage_error({"--grad-clip", "-1"}, {"--grad-clip", "'-1'"});
  expect_usage_error({"--weight-decay", "-0.1"}, {"--weight-decay", "'-0.1'"});
  expect_usage_error({"--val-every", "5", "--val-steps", "0"}, {"--val-steps", "'0'"});
  expect_usage_error({"--precision", "bf16"}, {"--precision", "bf16", "CPU"});
  expect_usage_error({"--precision", "fp8"}, {"--precision", "fp8", "CPU"});
}

TEST(TrainCli, AnOptionWithoutItsValueExitsTwoNamingIt) {
  // Not a run into a folder named "--resume": the value is missing.
  expect_usage_error({"--out", "--resume"},
                     {"gpt2-train: error: --out needs a value (the next argument, --resume, is "
                      "an option"});
  EXPECT_FALSE(std::filesystem::exists("--resume"));
  expect_usage_error({"--batch-size", "--steps", "3"}, {"--batch-size needs a value"});
  expect_usage_error({"--steps"}, {"gpt2-train: error: --steps needs a value"});
  expect_usage_error({"--resume=1"}, {"--resume takes no value (got '1')"});
  const auto result = run_trainer(tiny({"--lr"}));
  EXPECT_EQ(result.output.find("\u2018"), std::string::npos) << result.output;  // straight quotes
}

// A run writes, replaces and removes its files in --out: an input among them is refused, by
// any spelling, before anything is read or written.
TEST(TrainCli, AnInputAmongTheFilesTheRunWritesIsRefused) {
  const std::string out = testing::scratch_dir();
  const ModelConfig config = model_config_from_preset("d1", 64);
  write_model_checkpoint(model_checkpoint_path(out, 2), config,
                         std::vector<float>(ParameterLayout::for_config(config).total).data());
  expect_usage_error({"--model", model_checkpoint_path(out, 2), "--out", out},
                     {"--model " + model_checkpoint_path(out, 2) + " is a file that the run "
                      "writes or removes in --out " + out});
  expect_usage_error({"--model", out + "/../" + std::filesystem::path(out).filename().string() +
                                     "/model_00000002.bin",
                      "--out", out + "/."},
                     {"--model", "is a file that the run writes or removes"});
  expect_usage_error({"--train-data", out + "/*.bin", "--out", out},
                     {"--train-data " + model_checkpoint_path(out, 2)});
  EXPECT_FALSE(std::filesystem::exists(metrics_path(out)));
  std::filesystem::remove_all(out);
}

TEST(TrainCli, CudaWithoutAGpuExitsOneSayingWhy) {
  std::string why_not;
  if (cuda_backend_available(&why_not)) GTEST_SKIP() << "a CUDA device is present";
  const auto result = run_trainer({"--device", "cuda", "--steps", "1"});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(result.output.rfind("gpt2-train: error: --device cuda", 0), 0u) << result.output;
  EXPECT_NE(result.output.find(why_not), std::string::npos) << why_not << "\n" << result.output;
}

}  // namespace
}  // namespace gpt2
