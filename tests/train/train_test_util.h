/**
 * @file train_test_util.h
 * @brief Helpers of the trainer tests: run the real gpt2-train binary, scratch folders, and
 *        reading metrics.jsonl back.
 *
 * run_trainer() runs GPT2_TRAIN_BINARY (a compile definition) through the shell (run_command.h)
 * with stdout and stderr merged and returns the exit code and the output; BackgroundProcess runs it (or
 * mpirun) while the test watches its output and sends it signals. Scratch folders are unique per
 * process and test, so ctest may run the tests in parallel.
 */
#pragma once

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "base/json.h"
#include "run_command.h"

namespace gpt2::testing {

/// Runs gpt2-train with the given (already separate) arguments; env_assignments (e.g.
/// "GPT2_DATA_DIR=/x") prefix the command.
inline CommandResult run_trainer(const std::vector<std::string>& args,
                                 const std::string& env_assignments = "") {
  std::string command = env_assignments.empty() ? "" : env_assignments + " ";
  command += shell_quote(GPT2_TRAIN_BINARY);
  for (const std::string& arg : args) command += " " + shell_quote(arg);
  return run_command(command);
}

/// A program running in the background in its own process group (so a test can end all of
/// it: mpirun and its ranks), its stdout and stderr merged into one pipe. argv[0] is the
/// program's path. The destructor kills the whole group if it has not been waited for.
class BackgroundProcess {
 public:
  explicit BackgroundProcess(const std::vector<std::string>& argv) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> args;
      for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    setpgid(pid_, pid_);
    close(fds[1]);
    fd_ = fds[0];
  }
  ~BackgroundProcess() {
    if (pid_ > 0 && !reaped_) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& output() const { return output_; }

  /// Reads the output until it contains marker; false at the end of the output or after
  /// timeout_s seconds.
  bool wait_for(const std::string& marker, int timeout_s = 120) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (output_.find(marker) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline || !read_some(200)) return false;
    }
    return true;
  }

  /// Reads the rest of the output and waits for the exit: the exit code, or -signal when a
  /// signal killed the process.
  int finish() {
    while (read_some(-1)) {
    }
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return exit_code(status);
  }

  /// As finish(), but nullopt when the process had not ended after timeout_s seconds (the
  /// group is then killed by the destructor); anything of the group that outlived the process
  /// is killed.
  std::optional<int> finish(int timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
      read_some(200);
    }
    reaped_ = true;
    while (read_some(200)) {
    }
    kill(-pid_, SIGKILL);
    return exit_code(status);
  }

 private:
  static int exit_code(int status) {
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }

  // Appends what is readable; false at the end of the output (or, once the process has been
  // reaped, when nothing more comes within timeout_ms).
  bool read_some(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return timeout_ms >= 0 && !reaped_;
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) return false;
    output_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
  std::string output_;
};

/// The argv of gpt2-train with the given arguments, for BackgroundProcess.
inline std::vector<std::string> trainer_argv(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {GPT2_TRAIN_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

/// A fresh, empty folder named after the running test.
inline std::string scratch_dir(const std::string& tag = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string("gpt2_train_test_") + info->test_suite_name() + "_" +
                           info->name() + tag + "_" + std::to_string(getpid());
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline std::string embedded_train_data() {
  return std::string(GPT2_TEST_DATA_DIR) + "/default/kjv_train.bin";
}
inline std::string embedded_val_data() {
  return std::string(GPT2_TEST_DATA_DIR) + "/default/kjv_val.bin";
}

/// Every line of a metrics.jsonl, parsed; a line that is not a JSON object fails the test.
inline std::vector<Json> read_metrics(const std::string& path) {
  std::vector<Json> rows;
  std::istringstream lines(read_file_text(path));
  for (std::string line; std::getline(lines, line);) {
    const Json object = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(object.is_object()) << "unparseable metrics line: " << line;
    if (object.is_object()) rows.push_back(object);
  }
  return rows;
}

}  // namespace gpt2::testing
