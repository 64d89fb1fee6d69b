/**
 * @file mpi_test_util.h
 * @brief Launching a program as a job of several ranks in the tests: mpirun found (or why it
 *        is not), and the command line that CI (root, few cores, other tests running beside)
 *        needs.
 *
 * mpi_launcher() is GPT2_MPIEXEC (the launcher CMake found beside MPI) when it is executable,
 * else `mpirun` on PATH; its error names why there is none, for GTEST_SKIP. The launch options
 * (kMpiOptions) are what CI needs: --allow-run-as-root (it runs as root), --oversubscribe (more
 * ranks than cores), --bind-to none (other tests run on the same cores), shared memory without
 * the single-copy mechanism (CMA needs ptrace rights that containers often withhold), and
 * OMP_NUM_THREADS=1 for every rank (a rank per core, not a team per rank fighting for them).
 * mpi_command() puts them and -np N before a program.
 */
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace gpt2::testing {

/// The launcher's path, or "" with why_not saying why there is none.
inline std::string mpi_launcher(std::string* why_not) {
#ifdef GPT2_MPIEXEC
  const std::string configured = GPT2_MPIEXEC;
  if (!configured.empty() && access(configured.c_str(), X_OK) == 0) return configured;
#endif
  FILE* pipe = popen("command -v mpirun 2>/dev/null", "r");
  std::string path;
  if (pipe != nullptr) {
    char buf[4096];
    if (std::fgets(buf, sizeof buf, pipe) != nullptr) path = buf;
    pclose(pipe);
  }
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  if (path.empty() && why_not != nullptr)
    *why_not = "no mpirun on PATH (Debian: apt-get install openmpi-bin libopenmpi-dev)";
  return path;
}

inline const std::vector<std::string>& mpi_options() {
  static const std::vector<std::string> options = {
      "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca",
      "btl_vader_single_copy_mechanism", "none", "-x", "OMP_NUM_THREADS=1"};
  return options;
}

/// "mpirun <options> -np N <program>" (program already shell-quoted, with its arguments).
inline std::string mpi_command(const std::string& launcher, int ranks, const std::string& program) {
  std::string command = launcher;
  for (const std::string& option : mpi_options()) command += " " + option;
  return command + " -np " + std::to_string(ranks) + " " + program;
}

}  // namespace gpt2::testing
