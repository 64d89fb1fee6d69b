/**
 * @file mpi_test_util.h
 * @brief Launching a program as a job of several ranks in the tests: mpirun found (or why it
 *        is not), and the command line that CI (root, few cores, other tests running beside)
 *        needs.
 *
 * mpi_launcher() is GPT2_MPIEXEC (the launcher CMake found beside MPI) when it is executable,
 * else `mpirun` on PATH; its error names why there is none, for GTEST_SKIP. mpi_command()
 * prefixes a program with `mpirun --allow-run-as-root --oversubscribe --bind-to none -np N`
 * (root in CI; more ranks than cores; no pinning, since other tests run on the same cores) and
 * gives every rank OMP_NUM_THREADS=1 (a rank per core, not a team per rank fighting for them).
 */
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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

/// "mpirun ... -np N <program>" (program already shell-quoted, with its arguments).
inline std::string mpi_command(const std::string& launcher, int ranks, const std::string& program) {
  return launcher + " --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np " +
         std::to_string(ranks) + " " + program;
}

}  // namespace gpt2::testing
