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
 * Every failure is a gpt2::UsageError (exit code 2) naming the option.
 */
#pragma once

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

}  // namespace gpt2
