/**
 * @file bench_cli_test.cpp
 * @brief The benchmarks' command lines: gpt2-sweep, gpt2-attention-bench and gpt2-gemm-bench
 * refuse bad values with exit code 2 and a message naming the option, before running anything
 * (the kernel benches before touching a GPU, so these run on machines without one): a bad value,
 * an option without its value, an unknown option, a --csv that is a socket.
 */
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "run_command.h"

namespace gpt2 {
namespace {

using testing::CommandResult;
using testing::run_binary;

void expect_usage_error(const std::string& binary, const std::vector<std::string>& args,
                        const std::string& names) {
  const CommandResult run = run_binary(binary, args);
  std::string command = binary;
  for (const std::string& arg : args) command += " " + arg;
  EXPECT_EQ(run.exit_code, 2) << command << "\n" << run.output;
  EXPECT_NE(run.output.find(names), std::string::npos)
      << command << ": the message does not name '" << names << "':\n" << run.output;
}

TEST(SweepCli, BadValuesExitTwoNamingTheOption) {
  const std::string sweep = GPT2_SWEEP_BINARY;
  expect_usage_error(sweep, {"--seq-lens", "0"}, "--seq-lens");
  expect_usage_error(sweep, {"--seq-lens", "1024,abc"}, "--seq-lens");
  expect_usage_error(sweep, {"--tokens-per-step", "0"}, "--tokens-per-step");
  expect_usage_error(sweep, {"--steps"}, "gpt2-sweep: error: --steps needs a value");
  expect_usage_error(sweep, {"--out", "--steps", "3"}, "gpt2-sweep: error: --out needs a value");
  expect_usage_error(sweep, {"--frobnicate"}, "gpt2-sweep: error: unknown option '--frobnicate'");
}

class AttentionBenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(bench_))
      GTEST_SKIP() << "gpt2-attention-bench is not built here (it needs CUDA): " << bench_;
  }
  const std::string bench_ = GPT2_ATTENTION_BENCH_BINARY;
};

TEST_F(AttentionBenchCli, HelpNamesTheKernelsAndExitsZero) {
  const CommandResult run = run_binary(bench_, {"--help"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("--kernels"), std::string::npos) << run.output;
}

TEST_F(AttentionBenchCli, BadValuesExitTwoBeforeTheDevice) {
  expect_usage_error(bench_, {"--kernels", "flash-hopper/fwd99"}, "flash-hopper/fwd99");
  expect_usage_error(bench_, {"--kernels", "flash-portable/fwd64"}, "--kernels");
  expect_usage_error(bench_, {"--kernels", "flash-hopper,,naive"}, "--kernels");
  expect_usage_error(bench_, {"--head-sizes", "96"}, "--head-sizes");
  expect_usage_error(bench_, {"--seq-lens", "1024,x"}, "seq-lens");
  expect_usage_error(bench_, {"--repeats", "0"}, "--repeats");
  expect_usage_error(bench_, {"--burst", "0"}, "--burst must be >= 1");
  expect_usage_error(bench_, {"--warmup", "-1"}, "--warmup must be >= 0");
  expect_usage_error(bench_, {"--warmup-ms", "-5"}, "--warmup-ms takes 0 to 600000");
  expect_usage_error(bench_, {"--warmup-ms", "nan"}, "'nan' failed to parse");
  expect_usage_error(bench_, {"--warmup-ms", "1e9"}, "--warmup-ms takes 0 to 600000");
  expect_usage_error(bench_, {"--measure", "fwd,grad"}, "--measure");
  expect_usage_error(bench_, {"--measure", ""}, "--measure names nothing");
  expect_usage_error(bench_, {"--remeasure", "0"}, "--remeasure takes 1 to 100");
  expect_usage_error(bench_, {"--remeasure", "101"}, "--remeasure takes 1 to 100");
  expect_usage_error(bench_, {"--csv"}, "gpt2-attention-bench: error: --csv needs a value");
  expect_usage_error(bench_, {"--csv", "/dev/null/x", "--repeats"}, "--repeats needs a value");
}

TEST(GemmBenchCli, BadValuesExitTwoBeforeTheDevice) {
  const std::string bench = GPT2_GEMM_BENCH_BINARY;
  if (!std::filesystem::exists(bench))
    GTEST_SKIP() << "gpt2-gemm-bench is not built here (it needs CUDA): " << bench;
  EXPECT_EQ(run_binary(bench, {"--help"}).exit_code, 0);
  expect_usage_error(bench, {"--widths", "7"}, "--widths");
  expect_usage_error(bench, {"--widths", "768,x"}, "--widths");
  expect_usage_error(bench, {"--tokens", "100"}, "--tokens");
  expect_usage_error(bench, {"--repeats", "0"}, "--repeats");
  expect_usage_error(bench, {"--warmup-ms", "-1"}, "--warmup-ms takes 0 to 600000");
  expect_usage_error(bench, {"--frobnicate"},
                     "gpt2-gemm-bench: error: unknown option '--frobnicate'");
}

}  // namespace
}  // namespace gpt2
