/**
 * @file json_string.h
 * @brief JSON string literals: decoding (the tokenizer's encoder.json, metrics lines) and UTF-8.
 *
 * decode_json_string() reads the string literal whose opening quote is text[pos]: every JSON
 * escape (\" \\ \/ \b \f \n \r \t and \uXXXX, surrogate pairs combined) is decoded and the result
 * is UTF-8. On success it returns an empty string and leaves pos just past the closing quote; on
 * failure it returns what is wrong ("unterminated string", "unpaired high surrogate in \u
 * escape", ...) and pos points near the problem. Raw control characters are refused.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpt2 {

/// Appends the UTF-8 encoding of code point cp (at most 0x10FFFF) to out.
void append_utf8(uint32_t cp, std::string& out);

std::string decode_json_string(std::string_view text, size_t& pos, std::string* out);

}  // namespace gpt2
