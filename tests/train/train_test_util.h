/**
 * @file train_test_util.h
 * @brief Helpers of the trainer tests: run the real gpt2-train binary, scratch folders, and
 *        reading metrics.jsonl back.
 *
 * run_trainer() runs GPT2_TRAIN_BINARY (a compile definition) through the shell with stdout
 * and stderr merged and returns the exit code and the output. Scratch folders are unique per
 * process and test, so ctest may run the tests in parallel.
 */
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "data/file_io.h"
#include "data/json.h"

namespace gpt2::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) result.output.append(buf, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

/// Runs gpt2-train with the given (already separate) arguments; env_assignments (e.g.
/// "GPT2_DATA_DIR=/x") prefix the command.
inline CommandResult run_trainer(const std::vector<std::string>& args,
                                 const std::string& env_assignments = "") {
  std::string command = env_assignments.empty() ? "" : env_assignments + " ";
  command += shell_quote(GPT2_TRAIN_BINARY);
  for (const std::string& arg : args) command += " " + shell_quote(arg);
  return run_command(command);
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
