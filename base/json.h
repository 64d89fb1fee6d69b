/**
 * @file json.h
 * @brief The project's JSON: nlohmann::json (Debian's nlohmann-json3-dev) with the conventions
 *        every JSON file here follows (metrics.jsonl, summary.json, encoder.json, the sweep).
 *
 * Json keeps an object's keys in insertion order, so a metrics line reads as it was built; use
 * nlohmann::json (keys sorted, fast lookup) for large objects such as encoder.json.
 * json_float(f) is the double of f's shortest round-trip decimal: 10.987654f is written as
 * 10.987654 (not 10.987653732299805) and reads back, as a float, bit for bit. Non-finite
 * numbers are written as null (nlohmann's rule; JSON has no NaN).
 * dump_json() writes one line and never throws: bytes that are not UTF-8 in a string become
 * U+FFFD. parse_json() throws gpt2::Error "<source>: invalid JSON: <nlohmann's message, with the
 * line and column>". parse_json_unique_keys() also refuses an object that repeats a key
 * ("<source>: duplicate key 'k' in 'parent'"), where nlohmann would keep one of them silently:
 * for files whose keys name things (config.json, a safetensors header).
 */
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace gpt2 {

using Json = nlohmann::ordered_json;

double json_float(float value);

/// One line, no trailing newline.
std::string dump_json(const Json& value);

/// The whole of text must be one JSON value (surrounding white space allowed).
Json parse_json(std::string_view text, const std::string& source);

/// parse_json, and every object's keys distinct.
Json parse_json_unique_keys(std::string_view text, const std::string& source);

}  // namespace gpt2
