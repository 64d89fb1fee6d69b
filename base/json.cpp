#include "base/json.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

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

Json parse_json_unique_keys(std::string_view text, const std::string& source) {
  // One set of keys per open object, with the key the object is the value of (for the message).
  std::vector<std::pair<std::string, std::set<std::string>>> open_objects;
  std::string last_key;
  const Json::parser_callback_t check = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back(open_objects.empty() ? std::string() : last_key,
                                  std::set<std::string>());
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        last_key = parsed.get<std::string>();
        if (!open_objects.empty() && !open_objects.back().second.insert(last_key).second) {
          const std::string& parent = open_objects.back().first;
          GPT2_FAIL(source, ": duplicate key '", last_key, "'",
                    parent.empty() ? "" : " in '", parent, parent.empty() ? "" : "'");
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), check);
  } catch (const Json::exception& e) {
    GPT2_FAIL(source, ": invalid JSON: ", e.what());
  }
}

}  // namespace gpt2
