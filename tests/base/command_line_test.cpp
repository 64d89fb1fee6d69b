/**
 * @file command_line_test.cpp
 * @brief Tests for base/command_line.h: an option without its value is a usage error naming the
 *        option (never the next option taken as the value), a flag given a value too, and
 *        cxxopts' own errors come back in the project's words (straight quotes, --name).
 */
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/command_line.h"
#include "base/error.h"

namespace gpt2 {
namespace {

cxxopts::Options tool_options() {
  cxxopts::Options options("tool", "a tool");
  options.add_options()
      ("out", "a folder", cxxopts::value<std::string>())
      ("steps", "a count", cxxopts::value<std::string>()->default_value("50"))
      ("input", "files", cxxopts::value<std::vector<std::string>>())
      ("resume", "a flag")
      ("h,help", "help");
  options.parse_positional({"input"});
  return options;
}

// The UsageError message of parsing args, or "<parsed>".
std::string usage_error(const std::vector<std::string>& args) {
  cxxopts::Options options = tool_options();
  try {
    parse_tool_options(options, args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<parsed>";
}

TEST(CommandLine, AMissingValueNamesTheOption) {
  EXPECT_EQ(usage_error({"--out", "--resume"}),
            "--out needs a value (the next argument, --resume, is an option; write "
            "--out=VALUE for a value like that)");
  EXPECT_EQ(usage_error({"--steps", "--out", "x"}),
            "--steps needs a value (the next argument, --out, is an option; write "
            "--steps=VALUE for a value like that)");
  EXPECT_EQ(usage_error({"--resume", "--steps"}), "--steps needs a value");
  EXPECT_EQ(usage_error({"--out", "-h"}).rfind("--out needs a value", 0), 0u);
  // An unknown "--name" is not taken as a value either.
  EXPECT_EQ(usage_error({"--out", "--frobnicate"}).rfind("--out needs a value", 0), 0u);
  EXPECT_EQ(usage_error({"--input", "--out", "x"}).rfind("--input needs a value", 0), 0u);
}

TEST(CommandLine, ValuesThatLookLikeOptionsNeedTheEqualsForm) {
  cxxopts::Options options = tool_options();
  const cxxopts::ParseResult result =
      parse_tool_options(options, {"--out=--resume", "--steps", "-3", "--input", "a", "b"});
  EXPECT_EQ(result["out"].as<std::string>(), "--resume");
  EXPECT_EQ(result["steps"].as<std::string>(), "-3");  // a negative number is a value
  EXPECT_EQ(result["input"].as<std::vector<std::string>>(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(result.count("resume"), 0u);
}

TEST(CommandLine, AFlagTakesNoValue) {
  EXPECT_EQ(usage_error({"--resume=1"}), "--resume takes no value (got '1')");
  EXPECT_EQ(usage_error({"--help=yes"}), "--help takes no value (got 'yes')");
}

TEST(CommandLine, CxxoptsErrorsComeInTheProjectsWords) {
  EXPECT_EQ(usage_error({"--frobnicate"}), "unknown option '--frobnicate' (see --help)");
  const std::string message = usage_error({"--steps"});
  EXPECT_EQ(message, "--steps needs a value");
  EXPECT_EQ(message.find("\u2018"), std::string::npos);
}

}  // namespace
}  // namespace gpt2
