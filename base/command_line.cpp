/**
 * @file command_line.cpp
 * @brief parse_tool_options (see command_line.h): the value check, then cxxopts; the number
 *        parsers.
 *
 * The options' names and kinds come from the cxxopts::Options itself (every group's help
 * details: long and short names, and whether the option is a flag), so a tool declares each
 * option once. cxxopts 3 quotes names with typographic quotes and without dashes ("Option
 * ‘steps’ is missing an argument"); the messages here are the project's.
 */
#include "base/command_line.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>

#include "base/error.h"

namespace gpt2 {
namespace {

struct OptionKind {
  std::string name;  // as written: "--out", "-h"
  bool is_flag = false;
};

// Every spelling of every option ("--out", "-h") with whether it is a flag.
std::map<std::string, OptionKind> option_spellings(const cxxopts::Options& options) {
  std::map<std::string, OptionKind> spellings;
  for (const std::string& group : options.groups()) {
    for (const cxxopts::HelpOptionDetails& details : options.group_help(group).options) {
      const std::string long_name = details.l.empty() ? "-" + details.s : "--" + details.l.front();
      const OptionKind kind{long_name, details.is_boolean && !details.is_container};
      for (const std::string& name : details.l) spellings["--" + name] = kind;
      if (!details.s.empty()) spellings["-" + details.s] = kind;
    }
  }
  return spellings;
}

// Whether an argument is an option rather than a value: any "--name" (known or not: a value
// that looks like an option is far likelier a forgotten value), or one of the tool's short ones.
bool looks_like_an_option(const std::string& arg,
                          const std::map<std::string, OptionKind>& spellings) {
  if (arg.size() > 2 && arg.compare(0, 2, "--") == 0 &&
      std::isalnum(static_cast<unsigned char>(arg[2])))
    return true;
  return arg.size() >= 2 && arg[0] == '-' && arg[1] != '-' && spellings.count(arg.substr(0, 2));
}

void check_option_values(const cxxopts::Options& options, const std::vector<std::string>& args) {
  const std::map<std::string, OptionKind> spellings = option_spellings(options);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") break;  // everything after it is positional
    const size_t equals = arg.find('=');
    const bool has_inline_value = arg.compare(0, 2, "--") == 0 && equals != std::string::npos;
    const auto found = spellings.find(has_inline_value ? arg.substr(0, equals) : arg);
    if (found == spellings.end()) continue;  // a value, or an unknown option (the tool says so)
    const OptionKind& option = found->second;
    if (option.is_flag) {
      if (has_inline_value)
        GPT2_USAGE_FAIL(option.name, " takes no value (got '", arg.substr(equals + 1), "')");
      continue;
    }
    if (has_inline_value) continue;
    if (i + 1 == args.size()) GPT2_USAGE_FAIL(option.name, " needs a value");
    if (looks_like_an_option(args[i + 1], spellings)) {
      GPT2_USAGE_FAIL(option.name, " needs a value (the next argument, ", args[i + 1],
                      ", is an option; write ", option.name, "=VALUE for a value like that)");
    }
    ++i;  // the value
  }
}

// cxxopts' message with straight quotes and "--name" for a quoted option name.
std::string plain_message(std::string message) {
  for (const std::string& quote : {std::string("\u2018"), std::string("\u2019")}) {
    for (size_t at; (at = message.find(quote)) != std::string::npos;)
      message.replace(at, quote.size(), "'");
  }
  if (message.compare(0, 8, "Option '") == 0) {
    const size_t end = message.find('\'', 8);
    if (end != std::string::npos) {
      const std::string name = message.substr(8, end - 8);
      const std::string option = (name.size() == 1 ? "-" : "--") + name;
      const std::string rest = message.substr(end + 1);
      if (rest == " does not exist") return "unknown option '" + option + "'";
      message = option + rest;
    }
  }
  return message;
}

}  // namespace

cxxopts::ParseResult parse_tool_options(cxxopts::Options& options,
                                        const std::vector<std::string>& args) {
  check_option_values(options, args);
  std::vector<const char*> argv = {options.program().c_str()};
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  try {
    return options.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const cxxopts::exceptions::exception& e) {
    GPT2_USAGE_FAIL(plain_message(e.what()), " (see --help)");
  }
}

cxxopts::ParseResult parse_tool_options(cxxopts::Options& options, int argc,
                                        const char* const* argv) {
  return parse_tool_options(options,
                            std::vector<std::string>(argv + (argc > 0 ? 1 : 0), argv + argc));
}

int64_t parse_integer(const std::string& option, const std::string& text, int64_t min_value,
                      int64_t max_value, const char* expectation) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || (errno == ERANGE && value < 0) ||
      value < min_value) {
    GPT2_USAGE_FAIL("--", option, " must be ", expectation, " (got '", text, "')");
  }
  if (errno == ERANGE || value > max_value)
    GPT2_USAGE_FAIL("--", option, " is out of range: at most ", max_value, " (got '", text, "')");
  return value;
}

int parse_positive_int(const std::string& option, const std::string& text) {
  return static_cast<int>(
      parse_integer(option, text, 1, std::numeric_limits<int>::max(), "a positive integer"));
}

int parse_count(const std::string& option, const std::string& text) {
  return static_cast<int>(parse_integer(option, text, 0, std::numeric_limits<int>::max(),
                                        "a non-negative integer"));
}

std::vector<int> parse_positive_int_list(const std::string& option, const std::string& text) {
  std::vector<int> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ','))
    values.push_back(static_cast<int>(
        parse_integer(option, item, 1, 1 << 24, "a comma-separated list of positive integers")));
  if (values.empty())
    GPT2_USAGE_FAIL("--", option, " must be a comma-separated list of positive integers (got '",
                    text, "')");
  return values;
}

float parse_float(const std::string& option, const std::string& text, double min_value,
                  double max_value, const char* expectation) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || std::isnan(value) ||
      value < min_value) {
    GPT2_USAGE_FAIL("--", option, " must be ", expectation, " (got '", text, "')");
  }
  if (max_value == std::numeric_limits<float>::max() &&
      (errno == ERANGE || std::isinf(value) || value > max_value)) {
    // Underflow (ERANGE with a tiny value) is not an error: such a value is as good as 0.
    if (!(errno == ERANGE && std::fabs(value) < 1.0))
      GPT2_USAGE_FAIL("--", option, " is out of range: at most ", max_value, " (got '", text,
                      "')");
  } else if (value > max_value || !std::isfinite(value)) {
    GPT2_USAGE_FAIL("--", option, " must be ", expectation, " (got '", text, "')");
  }
  return static_cast<float>(value);
}

}  // namespace gpt2
