#include "base/json.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "base/error.h"

namespace gpt2 {

double json_float(float value) {
  if (!std::isfinite(value)) return static_cast<double>(value);
  char text[32];
  const std::to_chars_result end = std::to_chars(text, text + sizeof text - 1, value);
  GPT2_CHECK(end.ec == std::errc());
  *end.ptr = '\0';
  return std::strtod(text, nullptr);
}

std::string dump_json(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json parse_json(std::string_view text, const std::string& source) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    GPT2_FAIL(source, ": invalid JSON: ", e.what());
  }
}

}  // namespace gpt2
