/**
 * @file sweep_test.cpp
 * @brief gpt2-sweep's outcome: exit 0 when every point ran or ran out of memory (OOM, expected
 * at a device's limit: "out of GPU memory", or "not enough CPU memory"), exit 1 when any point
 * failed otherwise (naming its log); fp32 by default on --device cpu, where bf16 is a usage
 * error; a sweep with no successful point writes a plot that says so instead of empty axes.
 * Points run a stand-in gpt2-train (a shell script given as --train-binary) that records its
 * arguments and fails as told, and, once, the real gpt2-train on the CPU.
 */
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "run_command.h"

namespace gpt2 {
namespace {

using testing::CommandResult;
using testing::run_binary;

// A fresh folder named after the running test.
std::string scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    (std::string("gpt2_sweep_test_") + info->name() + "_" +
                                     std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// A stand-in gpt2-train that appends its arguments to DIR/args.txt, prints `message` and exits
// with `exit_code`.
std::string fake_trainer(const std::string& dir, const std::string& message, int exit_code) {
  const std::string path = dir + "/fake-gpt2-train";
  const std::string script = "#!/bin/sh\necho \"$@\" >> '" + dir + "/args.txt'\necho '" +
                             message + "' >&2\nexit " + std::to_string(exit_code) + "\n";
  AtomicFileWriter writer(path);
  writer.write(script.data(), script.size());
  writer.commit();
  ::chmod(path.c_str(), 0755);
  return path;
}

CommandResult sweep(const std::string& dir, const std::string& trainer,
                    std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"--seq-lens", "16,32", "--steps", "2", "--warmup-steps", "1",
                                   "--out", dir + "/sweep", "--train-binary", trainer};
  args.insert(args.end(), more.begin(), more.end());
  return run_binary(GPT2_SWEEP_BINARY, args);
}

TEST(Sweep, OnlyOutOfMemoryPointsExitZeroAndThePlotSaysNothingSucceeded) {
  const std::string dir = scratch_dir();
  const std::string gpu_oom = fake_trainer(
      dir, "gpt2-train: error: out of GPU memory: x needs 9 bytes; the plan needs 123456 bytes", 1);
  const CommandResult run = sweep(dir, gpu_oom);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const std::string csv = read_file_text(dir + "/sweep/sweep.csv");
  EXPECT_NE(csv.find(",OOM,"), std::string::npos) << csv;
  EXPECT_EQ(csv.find(",FAILED,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",123456,"), std::string::npos) << "the plan's bytes:\n" << csv;
  const std::string svg = read_file_text(dir + "/sweep/sweep.svg");
  EXPECT_NE(svg.find("no point of the sweep succeeded"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("<polyline"), std::string::npos) << svg;
  EXPECT_NE(run.output.find("no point succeeded"), std::string::npos) << run.output;

  const std::string cpu_oom = fake_trainer(
      dir, "gpt2-train: error: not enough CPU memory: the model needs 777 bytes (777 B)", 1);
  const CommandResult cpu = sweep(dir, cpu_oom, {"--device", "cpu"});
  EXPECT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_NE(read_file_text(dir + "/sweep/sweep.csv").find(",OOM,"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Sweep, APointThatFailsForAnotherReasonExitsOneNamingItsLog) {
  const std::string dir = scratch_dir();
  const std::string broken =
      fake_trainer(dir, "gpt2-train: error: unknown option '--frobnicate'", 2);
  const CommandResult run = sweep(dir, broken);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(read_file_text(dir + "/sweep/sweep.csv").find(",FAILED,"), std::string::npos);
  EXPECT_NE(run.output.find("FAILED for a reason other than memory"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find(dir + "/sweep/flash_T32.log"), std::string::npos) << run.output;
  // The table and the plot are written all the same.
  EXPECT_TRUE(file_exists(dir + "/sweep/sweep.md"));
  EXPECT_TRUE(file_exists(dir + "/sweep/sweep.svg"));
  // Re-rendering the CSV is not a failure.
  const CommandResult replot = run_binary(
      GPT2_SWEEP_BINARY, {"--replot", dir + "/sweep/sweep.csv", "--out", dir + "/replot"});
  EXPECT_EQ(replot.exit_code, 0) << replot.output;
  std::filesystem::remove_all(dir);
}

TEST(Sweep, TheCpuTakesFp32ByDefaultAndRefusesBf16) {
  const std::string dir = scratch_dir();
  const std::string trainer = fake_trainer(dir, "out of GPU memory", 1);
  EXPECT_EQ(sweep(dir, trainer, {"--device", "cpu"}).exit_code, 0);
  const std::string cpu_args = read_file_text(dir + "/args.txt");
  EXPECT_NE(cpu_args.find("--precision fp32"), std::string::npos) << cpu_args;
  EXPECT_EQ(cpu_args.find("bf16"), std::string::npos) << cpu_args;
  std::filesystem::remove(dir + "/args.txt");
  EXPECT_EQ(sweep(dir, trainer, {"--device", "cuda"}).exit_code, 0);
  EXPECT_NE(read_file_text(dir + "/args.txt").find("--precision bf16"), std::string::npos);

  const CommandResult refused = sweep(dir, trainer, {"--device", "cpu", "--precision", "bf16"});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--precision bf16 needs --device cuda"), std::string::npos)
      << refused.output;
  const CommandResult fp8_refused =
      sweep(dir, trainer, {"--device", "cpu", "--precision", "fp8"});
  EXPECT_EQ(fp8_refused.exit_code, 2) << fp8_refused.output;
  std::filesystem::remove(dir + "/args.txt");
  EXPECT_EQ(sweep(dir, trainer, {"--device", "cuda", "--precision", "fp8"}).exit_code, 0);
  EXPECT_NE(read_file_text(dir + "/args.txt").find("--precision fp8"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// --context-parallel N: each point's gpt2-train starts under the launcher with
// --context-parallel N; naive attention and T below 2N chunks of 128 on cuda are usage errors.
TEST(Sweep, AContextParallelPointRunsUnderItsLauncher) {
  const std::string dir = scratch_dir();
  const std::string trainer = fake_trainer(dir, "gpt2-train: error: out of GPU memory", 1);
  const std::string launcher = dir + "/launcher";
  const std::string script = "#!/bin/sh\necho launcher \"$@\" >> '" + dir + "/args.txt'\n"
                             "exec \"$@\"\n";
  AtomicFileWriter writer(launcher);
  writer.write(script.data(), script.size());
  writer.commit();
  ::chmod(launcher.c_str(), 0755);
  const CommandResult run = run_binary(
      GPT2_SWEEP_BINARY, {"--seq-lens", "512,1024", "--steps", "2", "--warmup-steps", "1",
                          "--out", dir + "/sweep", "--train-binary", trainer,
                          "--context-parallel", "2", "--launcher", launcher});
  EXPECT_EQ(run.exit_code, 0) << run.output;  // OOM points only
  const std::string args = read_file_text(dir + "/args.txt");
  EXPECT_NE(args.find("launcher " + trainer + " --context-parallel 2 --device cuda"),
            std::string::npos) << args;
  EXPECT_EQ(args.find("--attn naive"), std::string::npos) << "flash only by default: " << args;
  EXPECT_NE(read_file_text(dir + "/sweep/sweep.md").find("x2 (a group sharing each sequence"),
            std::string::npos);
  const CommandResult naive = sweep(dir, trainer, {"--context-parallel", "2", "--attn", "naive"});
  EXPECT_EQ(naive.exit_code, 2) << naive.output;
  EXPECT_NE(naive.output.find("needs --attn flash"), std::string::npos) << naive.output;
  const CommandResult shorter = sweep(dir, trainer, {"--context-parallel", "2"});  // T = 16, 32
  EXPECT_EQ(shorter.exit_code, 2) << shorter.output;
  EXPECT_NE(shorter.output.find("at least 512"), std::string::npos) << shorter.output;
  const CommandResult alone = sweep(dir, trainer, {"--launcher", "mpirun"});
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  std::filesystem::remove_all(dir);
}

TEST(Sweep, ARealCpuSweepSucceedsAndPlotsReadableTicks) {
  const std::string dir = scratch_dir();
  const CommandResult run = run_binary(
      GPT2_SWEEP_BINARY, {"--device", "cpu", "--model", "d1", "--seq-lens", "16,32", "--attn",
                          "flash", "--steps", "2", "--warmup-steps", "1", "--tokens-per-step",
                          "32", "--out", dir + "/sweep"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string csv = read_file_text(dir + "/sweep/sweep.csv");
  EXPECT_EQ(csv.find(",FAILED,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",ok,"), std::string::npos) << csv;
  const std::string svg = read_file_text(dir + "/sweep/sweep.svg");
  EXPECT_EQ(svg.find("no point of the sweep succeeded"), std::string::npos);
  EXPECT_EQ(svg.find(">0K<"), std::string::npos) << "CPU tokens/s are below a thousand:\n" << svg;
  EXPECT_NE(svg.find("&#9632; flash"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpt2
