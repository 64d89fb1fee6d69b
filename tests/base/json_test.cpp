// base/json.h: the conventions every JSON file of the project follows, on top of nlohmann::json.
#include "base/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "base/error.h"

namespace gpt2 {
namespace {

TEST(Json, FloatsAreWrittenAsTheirShortestDecimalAndReadBackExactly) {
  for (const float value : {10.987654f, 6e-4f, 1e-7f, 3.4028235e38f, 1.17549435e-38f, 0.1f,
                            -2.5f, 0.0f, 16777217.0f}) {
    Json object;
    object["v"] = json_float(value);
    const std::string line = dump_json(object);
    EXPECT_LE(line.size(), std::string("{\"v\":-1.17549435e-38}").size()) << line;
    EXPECT_EQ(parse_json(line, "x").at("v").get<float>(), value) << line;
  }
  Json object;
  object["loss"] = json_float(10.987654f);
  EXPECT_EQ(dump_json(object), "{\"loss\":10.987654}");
  object["loss"] = json_float(std::numeric_limits<float>::quiet_NaN());
  object["norm"] = json_float(-std::numeric_limits<float>::infinity());
  EXPECT_EQ(dump_json(object), "{\"loss\":null,\"norm\":null}");
}

TEST(Json, ObjectsKeepTheirKeyOrder) {
  Json object;
  object["step"] = 1;
  object["loss"] = 2;
  object["attn"] = "flash";
  EXPECT_EQ(dump_json(object), "{\"step\":1,\"loss\":2,\"attn\":\"flash\"}");
}

TEST(Json, StringsAreEscapedAndInvalidUtf8IsReplacedNotThrown) {
  Json object;
  object["text"] = "q\"\\\n";
  object["bytes"] = "a\xff";  // not UTF-8: a device name could hold anything
  const std::string line = dump_json(object);
  EXPECT_EQ(line, "{\"text\":\"q\\\"\\\\\\n\",\"bytes\":\"a\xef\xbf\xbd\"}");
  EXPECT_EQ(parse_json(line, "x").at("text"), "q\"\\\n");
}

TEST(Json, ParseErrorsNameTheSourceAndThePlace) {
  for (const char* bad : {"", "{", "{\"step\":3", "{\"step\":3,}", "{\"a\":1}x", "{\"a\":abc}",
                          "{\"a\":\"\\uZZZZ\"}", "{\"step\":"}) {
    try {
      parse_json(bad, "some/file.json");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("some/file.json: invalid JSON: ", 0), 0u) << message;
      EXPECT_NE(message.find("column"), std::string::npos) << message;
    }
  }
  EXPECT_TRUE(parse_json(" { \"a\" : 1.5e-3 , \"b\":\"\\u0041\" } ", "x").is_object());
}

TEST(Json, UniqueKeysRefusesARepeatedKeyAtAnyDepthNamingIt) {
  const Json ok = parse_json_unique_keys(R"({"a": {"x": 1, "y": [{"x": 2}, {"x": 3}]}, "x": 4})",
                                         "ok.json");
  EXPECT_EQ(ok.at("a").at("y").at(1).at("x"), 3);
  try {
    parse_json_unique_keys(R"({"n_embd": 64, "n_head": 2, "n_embd": 128})", "config.json");
    FAIL() << "a repeated top-level key was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "config.json: duplicate key 'n_embd'");
  }
  try {
    parse_json_unique_keys(R"({"w": {"dtype": "F32", "shape": [1], "dtype": "F16"}})", "h");
    FAIL() << "a repeated nested key was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "h: duplicate key 'dtype' in 'w'");
  }
  EXPECT_THROW(parse_json_unique_keys("{\"a\": ", "x"), Error);
}

}  // namespace
}  // namespace gpt2
