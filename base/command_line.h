/**
 * @file command_line.h
 * @brief The one way every tool parses its command line with cxxopts.
 *
 * parse_tool_options() checks what cxxopts would otherwise get wrong before handing argv to it:
 *   - an option that takes a value must have one: a missing value (the option is last, or the
 *     next argument is another option: "--name..." or a short option of the tool such as -h)
 *     is "--out needs a value" rather than the next option read as the value;
 *   - a flag given a value ("--resume=1") is "--resume takes no value (got '1')".
 * A value that starts with "--" can still be given as --name=--value. Whatever cxxopts itself
 * throws is rethrown in the same words, with straight quotes and the option as --name.
 * Every failure is a gpt2::UsageError (exit code 2) naming the option; so are the number
 * parsers' (parse_integer and friends), which tools use on the values cxxopts hands back as
 * strings.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cxxopts.hpp>

namespace gpt2 {

/// args excludes the program name.
cxxopts::ParseResult parse_tool_options(cxxopts::Options& options,
                                        const std::vector<std::string>& args);
/// argv as main() has it (argv[0] the program).
cxxopts::ParseResult parse_tool_options(cxxopts::Options& options, int argc,
                                        const char* const* argv);

/// The numbers of a command line: each throws gpt2::UsageError naming --option and the text,
/// "must be <expectation>" or "is out of range: at most N".
int64_t parse_integer(const std::string& option, const std::string& text, int64_t min_value,
                      int64_t max_value, const char* expectation);
int parse_positive_int(const std::string& option, const std::string& text);
int parse_count(const std::string& option, const std::string& text);  // >= 0
/// A comma-separated list of positive integers (each at most 2^24), e.g. --seq-lens 512,1024.
std::vector<int> parse_positive_int_list(const std::string& option, const std::string& text);
/// A float in [min_value, max_value]; max_value = FLT_MAX means "any finite float".
float parse_float(const std::string& option, const std::string& text, double min_value,
                  double max_value, const char* expectation);

}  // namespace gpt2
