/**
 * @file run_command.h
 * @brief Tests that run this project's binaries do it through the shell, with these helpers.
 *
 * run_command runs one shell command line and returns its exit code (-1 when it did not start
 * or did not exit normally) and what it printed: stdout and stderr together unless the caller
 * redirects stderr itself (join_stderr = false). run_binary quotes a binary and its arguments
 * for the shell first, so arguments may hold spaces and quotes.
 */
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

namespace gpt2::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

inline std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline CommandResult run_command(const std::string& command, bool join_stderr = true) {
  CommandResult result;
  FILE* pipe = popen((join_stderr ? command + " 2>&1" : command).c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) result.output.append(buf, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline CommandResult run_binary(const std::string& binary, const std::vector<std::string>& args) {
  std::string command = shell_quote(binary);
  for (const std::string& arg : args) command += " " + shell_quote(arg);
  return run_command(command);
}

}  // namespace gpt2::testing
