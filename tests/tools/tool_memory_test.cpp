/**
 * @file tool_memory_test.cpp
 * @brief The CUDA libraries are loaded when a GPU path needs them, not at start: every tool's
 *        --help stays small (it took about 220 MB when cuBLAS was linked to load at start), and
 *        a --device cpu run never maps cuBLAS (the dynamic loader's own log, LD_DEBUG=libs, says
 *        what it loads).
 */
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "run_command.h"

namespace gpt2 {
namespace {

// Peak resident memory of one run of binary (the child's own max RSS), in bytes; -1 when it
// does not exit 0.
long peak_memory_bytes(const std::string& binary, const std::vector<std::string>& args) {
  const pid_t child = fork();
  if (child == 0) {
    if (freopen("/dev/null", "w", stdout) == nullptr) _exit(126);
    std::vector<char*> argv = {const_cast<char*>(binary.c_str())};
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  if (wait4(child, &status, 0, &usage) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return -1;
  return usage.ru_maxrss * 1024;  // Linux reports KiB
}

#ifdef GPT2_CUBLAS_LINKED_AT_START
#define GPT2_REQUIRE_LAZY_CUBLAS() \
  GTEST_SKIP() << "this build links cuBLAS at start (GPT2_LAZY_CUBLAS=OFF)"
#else
#define GPT2_REQUIRE_LAZY_CUBLAS() (void)0
#endif

TEST(ToolMemory, HelpOfEveryToolStaysSmall) {
  GPT2_REQUIRE_LAZY_CUBLAS();
  constexpr long kLimit = 64L << 20;
  for (const std::string binary :
       {GPT2_TRAIN_BINARY, GPT2_TOKENIZE_BINARY, GPT2_CONVERT_BINARY, GPT2_GENERATE_BINARY,
        GPT2_SWEEP_BINARY, GPT2_ATTENTION_BENCH_BINARY}) {
    if (!std::filesystem::exists(binary)) continue;  // the attention bench needs CUDA
    const long peak = peak_memory_bytes(binary, {"--help"});
    EXPECT_GT(peak, 0) << binary;
    EXPECT_LT(peak, kLimit) << binary << " --help: peak " << (peak >> 20) << " MiB";
  }
}

TEST(ToolMemory, ACpuRunNeverLoadsCublas) {
  GPT2_REQUIRE_LAZY_CUBLAS();
  const std::string out = ::testing::TempDir() + "/gpt2_tool_memory_" + std::to_string(getpid());
  const testing::CommandResult run = testing::run_command(
      "LD_DEBUG=libs " + testing::shell_quote(GPT2_TRAIN_BINARY) +
      " --device cpu --model d1 --max-seq-len 64 --batch-size 1 --seq-len 16 --steps 1 "
      "--val-every 0 --train-data " +
      testing::shell_quote(std::string(GPT2_TEST_DATA_DIR) + "/default/kjv_train.bin") +
      " --out " + testing::shell_quote(out));
  std::filesystem::remove_all(out);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("libc.so"), std::string::npos) << "no loader log: " << run.output;
  EXPECT_EQ(run.output.find("libcublas"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace gpt2
