// The single-process communicator, launch detection from the environment, and the MPI
// communicator's collectives and abort in real processes (2 and 3 ranks under mpirun; skipped,
// saying why, without mpirun or in a build without MPI).
#include "parallel/communicator.h"

#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <memory>
#include <vector>

#include "base/error.h"
#include "mpi_test_util.h"
#include "run_command.h"

namespace gpt2 {
namespace {

using Result = testing::CommandResult;
using testing::run_command;

#define GPT2_REQUIRE_MPI(launcher)                                                  \
  std::string launcher;                                                             \
  do {                                                                              \
    if (!mpi_backend_available()) GTEST_SKIP() << "this build has no MPI backend";  \
    std::string why_not;                                                            \
    launcher = testing::mpi_launcher(&why_not);                                     \
    if (launcher.empty()) GTEST_SKIP() << why_not;                                  \
  } while (0)

TEST(SingleProcessCommunicator, CollectivesAreTheIdentity) {
  SingleProcessCommunicator comm;
  EXPECT_STREQ(comm.backend(), "single");
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);
  EXPECT_EQ(comm.local_rank(), 0);
  EXPECT_EQ(comm.local_size(), 1);
  std::vector<float> data = {1.5f, -2.0f, 3.25f};
  comm.all_reduce(data.data(), data.size(), ReduceOp::kSum);
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  double d = 0.1;
  comm.all_reduce(&d, 1, ReduceOp::kMax);
  EXPECT_EQ(d, 0.1);
  std::vector<float> out(3, 0.0f);
  comm.reduce_scatter_sum(data.data(), out.data(), 3);
  EXPECT_EQ(out, data);
  std::fill(out.begin(), out.end(), 0.0f);
  comm.all_gather(data.data(), out.data(), 3);
  EXPECT_EQ(out, data);
  comm.reduce_scatter_sum(data.data(), data.data(), 3);  // in place
  comm.all_gather(data.data(), data.data(), 3);
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  const std::vector<unsigned char> bytes = {1, 2, 3, 4, 5};
  std::vector<unsigned char> gathered(bytes.size(), 0);
  comm.all_gather_bytes(bytes.data(), gathered.data(), bytes.size());
  EXPECT_EQ(gathered, bytes);
  comm.all_gather_bytes(gathered.data(), gathered.data(), gathered.size());  // in place
  EXPECT_EQ(gathered, bytes);
  int value = 7;
  comm.broadcast(&value, sizeof value, 0);
  EXPECT_EQ(value, 7);
  EXPECT_THROW(comm.broadcast(&value, sizeof value, 1), Error);
  std::vector<uint16_t> halves = {0x3F80, 0xC000, 0x4049};  // 1, -2, 3.140625 in bf16
  const std::vector<uint16_t> original = halves;
  comm.all_reduce_sum_bf16(halves.data(), halves.size());
  EXPECT_EQ(halves, original);
  std::vector<uint16_t> halves_out(3, 0);
  comm.reduce_scatter_sum_bf16(halves.data(), halves_out.data(), 3);
  EXPECT_EQ(halves_out, original);
  comm.barrier();
  EXPECT_EQ(sum_in_rank_order(comm, 0.3), 0.3);
  const std::unique_ptr<Communicator> group = comm.split(5, 0);
  EXPECT_EQ(group->world_size(), 1);
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(comm.stats().calls, 13);
}

TEST(Bf16Sum, AddsInFp32AndRoundsToNearestEven) {
  EXPECT_EQ(add_bf16(0x3F80, 0x3F80), 0x4000);  // 1 + 1 = 2
  // 1 + 2^-8: exactly halfway between 1 and 1 + 2^-7 in bf16: ties to even, 1.
  EXPECT_EQ(add_bf16(0x3F80, 0x3B80), 0x3F80);
  // 1 + 3 * 2^-9 = 1.005859375: the nearest bf16 is 1 + 2^-7 = 1.0078125.
  EXPECT_EQ(add_bf16(0x3F80, 0x3BC0), 0x3F81);
  EXPECT_EQ(add_bf16(0x4000, 0xC000), 0x0000);  // 2 - 2 = +0
}

// Environment variables of one test process (ctest runs every TEST in its own).
void clear_launch_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
                           "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"})
    unsetenv(name);
}

TEST(Launch, DetectedFromTheLaunchersEnvironment) {
  clear_launch_environment();
  EXPECT_FALSE(detect_launch().launched);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  LaunchInfo info = detect_launch();
  EXPECT_TRUE(info.launched);
  EXPECT_EQ(info.launcher, "mpirun");
  EXPECT_EQ(info.world_size, 4);
  clear_launch_environment();
  setenv("PMIX_RANK", "3", 1);
  setenv("SLURM_STEP_NUM_TASKS", "16", 1);
  info = detect_launch();
  EXPECT_TRUE(info.launched);
  EXPECT_EQ(info.launcher, "PMIx");
  EXPECT_EQ(info.world_size, 16);
  clear_launch_environment();
  setenv("PMI_RANK", "0", 1);
  setenv("PMI_SIZE", "2", 1);
  info = detect_launch();
  EXPECT_EQ(info.launcher, "PMI");
  EXPECT_EQ(info.world_size, 2);
  clear_launch_environment();
}

TEST(Launch, APlainRunOrAJobOfOneRankIsOneProcessWithoutMpi) {
  clear_launch_environment();
  EXPECT_STREQ(make_job_communicator()->backend(), "single");
  setenv("OMPI_COMM_WORLD_SIZE", "1", 1);  // mpirun -np 1
  EXPECT_STREQ(make_job_communicator()->backend(), "single");
  clear_launch_environment();
}

TEST(Launch, SrunWithoutPmiIsRefused) {
  clear_launch_environment();
  setenv("SLURM_STEP_NUM_TASKS", "8", 1);
  setenv("SLURM_PROCID", "5", 1);
  try {
    make_job_communicator();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("task 5 of 8"), std::string::npos) << what;
    EXPECT_NE(what.find("--mpi=pmix"), std::string::npos) << what;
  }
  clear_launch_environment();
}

TEST(MpiCommunicator, CollectivesOnTwoAndThreeRanks) {
  GPT2_REQUIRE_MPI(launcher);
  for (const int ranks : {2, 3}) {
    const Result result =
        run_command(testing::mpi_command(launcher, ranks, GPT2_MPI_COLLECTIVES_WORKER));
    EXPECT_EQ(result.exit_code, 0) << result.output;
    for (int rank = 0; rank < ranks; ++rank) {
      const std::string ok = "rank " + std::to_string(rank) + " of " + std::to_string(ranks) + ": ok";
      EXPECT_NE(result.output.find(ok), std::string::npos) << result.output;
    }
  }
}

TEST(MpiCommunicator, AbortEndsEveryRankWithItsCode) {
  GPT2_REQUIRE_MPI(launcher);
  const auto start = std::chrono::steady_clock::now();
  // timeout: a job that hangs fails the test (124) instead of the test hanging.
  const Result result = run_command("timeout -s KILL 60 " +
                            testing::mpi_command(launcher, 2,
                                                 std::string(GPT2_MPI_COLLECTIVES_WORKER) +
                                                     " abort 7"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(result.exit_code, 7) << result.output;
  EXPECT_LT(seconds, 30.0) << result.output;
  EXPECT_NE(result.output.find("rank 1: aborting the job"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("passed a barrier"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace gpt2
