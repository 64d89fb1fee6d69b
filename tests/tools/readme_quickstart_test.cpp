/**
 * @file readme_quickstart_test.cpp
 * @brief The README's quick start, run as written: the commands between the README's
 * `<!-- quickstart:begin -->` and `<!-- quickstart:end -->` markers (every ```sh block there).
 *
 * They run with bash -eu -o pipefail in a temporary folder that looks like a fresh clone after
 * `make`: a link to each top-level entry of the source tree (not build*, out, .git) and `build`
 * linked to this build's binaries. Each command must succeed, and the files the README says the
 * steps leave must be there: the shards, the final model and state, the run's record and loss
 * curves, the Hugging Face directory with its tokenizer files. CPU only; about a minute.
 */
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBegin = "<!-- quickstart:begin -->";
constexpr const char* kEnd = "<!-- quickstart:end -->";

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The shell lines of every ```sh block between the markers; empty when there are none.
std::string quickstart_commands(const std::string& readme, std::string* problem) {
  const size_t begin = readme.find(kBegin);
  const size_t end = readme.find(kEnd);
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    *problem = "README.md has no quickstart:begin ... quickstart:end markers in that order";
    return "";
  }
  if (readme.find(kBegin, begin + 1) != std::string::npos) {
    *problem = "README.md has more than one quickstart:begin marker";
    return "";
  }
  std::istringstream lines(readme.substr(begin, end - begin));
  std::string line, commands;
  bool in_sh = false;
  while (std::getline(lines, line)) {
    if (!in_sh && line == "```sh") {
      in_sh = true;
    } else if (in_sh && line == "```") {
      in_sh = false;
    } else if (in_sh) {
      commands += line + "\n";
    }
  }
  if (in_sh) *problem = "a ```sh block between the quickstart markers is not closed";
  return commands;
}

TEST(ReadmeQuickstart, RunsAsWritten) {
  const fs::path source = GPT2_SOURCE_DIR;
  const fs::path binaries = fs::path(GPT2_TRAIN_BINARY).parent_path();
  std::string problem;
  const std::string commands = quickstart_commands(read_text(source / "README.md"), &problem);
  ASSERT_TRUE(problem.empty()) << problem;
  ASSERT_NE(commands.find("gpt2-train"), std::string::npos) << "no quick start in README.md";

  const fs::path clone = fs::path(::testing::TempDir()) /
                         ("gpt2_readme_quickstart_" + std::to_string(::getpid()));
  fs::remove_all(clone);
  fs::create_directories(clone);
  for (const fs::directory_entry& entry : fs::directory_iterator(source)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("build", 0) == 0 || name == "out" || name == ".git") continue;
    fs::create_directory_symlink(entry.path(), clone / name);
  }
  fs::create_directory_symlink(binaries, clone / "build");
  {
    std::ofstream script(clone / "quickstart.sh");
    script << commands;
  }

  const testing::CommandResult result = testing::run_command(
      "cd " + testing::shell_quote(clone.string()) + " && bash -eu -o pipefail -x quickstart.sh");
  ASSERT_EQ(result.exit_code, 0) << "the README's quick start failed:\n"
                                 << commands << "\n--- output ---\n"
                                 << result.output;

  // What the README says the steps leave.
  const fs::path out = clone / "out" / "quickstart";
  for (const char* file : {"data/docs_val_000000.bin", "data/docs_train_000001.bin",
                           "run/model_00000050.bin", "run/state_00000050.bin",
                           "run/metrics.jsonl", "run/loss.svg", "run/config.json",
                           "run/summary.json", "hf/config.json", "hf/model.safetensors",
                           "hf/generation_config.json", "hf/vocab.json", "hf/merges.txt",
                           "hf/tokenizer_config.json"}) {
    EXPECT_TRUE(fs::is_regular_file(out / file)) << (out / file) << " missing";
  }
  fs::remove_all(clone);
}

}  // namespace
}  // namespace gpt2
