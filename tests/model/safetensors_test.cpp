/**
 * @file safetensors_test.cpp
 * @brief model/safetensors.h: files assembled byte by byte here (safetensors_test_util.h) parse
 *        and read as fp32 (F32, F16 with subnormals, inf and NaN, BF16); written files are
 *        taken apart byte by byte here; every malformed file is refused naming the file and the
 *        tensor or field.
 */
#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "safetensors_test_util.h"

namespace gpt2 {
namespace {

using testing::assemble_raw;
using testing::assemble_safetensors;
using testing::f32_bytes;
using testing::HandTensor;
using testing::le64;
using testing::read_bytes;
using testing::scratch_folder;
using testing::u16_bytes;
using testing::write_bytes;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { folder_ = scratch_folder("safetensors"); }
  void TearDown() override { std::filesystem::remove_all(folder_); }

  std::string file(const std::string& bytes, const std::string& name = "t.safetensors") {
    const std::string path = folder_ + "/" + name;
    write_bytes(path, bytes);
    return path;
  }

  /// The message of the gpt2::Error that opening (and reading every tensor of) bytes throws.
  std::string open_error(const std::string& bytes) {
    const std::string path = file(bytes);
    try {
      SafetensorsReader reader(path);
      std::vector<float> values;
      for (const SafetensorsTensor& tensor : reader.tensors()) {
        values.resize(tensor.num_elements());
        reader.read_f32(tensor, values.data());
      }
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;  // starts with the file
      return message;
    }
    ADD_FAILURE() << "no error";
    return "";
  }

  std::string folder_;
};

TEST_F(SafetensorsTest, HandWrittenFileParsesAndReadsEveryDtype) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<HandTensor> tensors = {
      {"b.f32", "F32", {2, 3}, f32_bytes({1.5f, -2.0f, 0.0f, 3.25f, 1e-30f, -inf})},
      // 1, -2, 2^-24 (smallest subnormal), 1023 * 2^-24 (largest subnormal), 65504, -inf, NaN, -0
      {"a.f16", "F16", {8}, u16_bytes({0x3C00, 0xC000, 0x0001, 0x03FF, 0x7BFF, 0xFC00, 0x7E00,
                                       0x8000})},
      {"c.bf16", "BF16", {1, 2, 2}, u16_bytes({0x3F80, 0xC020, 0x0001, 0x7F80})},
      {"d.scalar", "F32", {}, f32_bytes({42.0f})},
      {"e.empty", "F32", {0, 4}, ""},
      {"f.ints", "I32", {2}, std::string(8, '\x01')},
  };
  const std::string path =
      file(assemble_safetensors(tensors, R"({"format":"pt","note":"hand made"})"));
  SafetensorsReader reader(path);
  ASSERT_EQ(reader.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensor& t = reader.tensors()[i];  // data order = the order written here
    EXPECT_EQ(t.name, tensors[i].name);
    EXPECT_EQ(to_string(t.dtype), tensors[i].dtype);
    EXPECT_EQ(t.shape, tensors[i].shape);
    EXPECT_EQ(t.end - t.begin, tensors[i].bytes.size());
  }
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  EXPECT_EQ(reader.metadata().at("note"), "hand made");
  ASSERT_NE(reader.find("c.bf16"), nullptr);
  EXPECT_EQ(reader.find("missing"), nullptr);
  EXPECT_EQ(reader.find("d.scalar")->num_elements(), 1u);
  EXPECT_EQ(reader.find("e.empty")->num_elements(), 0u);

  std::vector<float> f32(6), f16(8), bf16(4), scalar(1);
  reader.read_f32(*reader.find("b.f32"), f32.data());
  EXPECT_EQ(f32, (std::vector<float>{1.5f, -2.0f, 0.0f, 3.25f, 1e-30f, -inf}));
  reader.read_f32(*reader.find("a.f16"), f16.data());
  EXPECT_EQ(f16[0], 1.0f);
  EXPECT_EQ(f16[1], -2.0f);
  EXPECT_EQ(f16[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(f16[3], std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16[4], 65504.0f);
  EXPECT_EQ(f16[5], -inf);
  EXPECT_TRUE(std::isnan(f16[6]));
  EXPECT_TRUE(f16[7] == 0.0f && std::signbit(f16[7]));
  // c.bf16 is skipped: tensors passed over are fine, going back is not.
  reader.read_f32(*reader.find("d.scalar"), scalar.data());
  EXPECT_EQ(scalar[0], 42.0f);
  EXPECT_THROW(reader.read_f32(*reader.find("c.bf16"), bf16.data()), Error);
  try {
    reader.read_f32(*reader.find("f.ints"), f32.data());
    FAIL() << "an I32 tensor was read as fp32";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'f.ints' is I32"), std::string::npos) << e.what();
  }

  SafetensorsReader again(path);
  again.read_f32(*again.find("c.bf16"), bf16.data());
  EXPECT_EQ(bf16[0], 1.0f);
  EXPECT_EQ(bf16[1], -2.5f);
  EXPECT_EQ(bf16[2], std::numeric_limits<float>::denorm_min() * float(1 << 16));  // 2^-133
  EXPECT_EQ(bf16[3], inf);
}

TEST_F(SafetensorsTest, OffsetsNeedNotFollowTheHeaderOrder) {
  // Header order b, a; data order a, b (the header is a JSON object: its order means nothing).
  const std::string header =
      R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const std::string path = file(assemble_raw(header, f32_bytes({1.0f, 2.0f})));
  SafetensorsReader reader(path);
  ASSERT_EQ(reader.tensors().size(), 2u);
  EXPECT_EQ(reader.tensors()[0].name, "a");
  float a = 0, b = 0;
  reader.read_f32(*reader.find("a"), &a);
  reader.read_f32(*reader.find("b"), &b);
  EXPECT_EQ(a, 1.0f);
  EXPECT_EQ(b, 2.0f);
}

// The written file taken apart byte by byte: the length, the space padding to 8 bytes, the
// header (metadata first, tensors sorted by name, offsets back to back), then raw fp32.
TEST_F(SafetensorsTest, WrittenFileFollowsTheReferenceLayout) {
  const std::string path = folder_ + "/out.safetensors";
  std::vector<SafetensorsOutput> outputs;
  outputs.push_back({"zeta", {3}, [](float* v) { v[0] = 1; v[1] = 2; v[2] = 3; }});
  outputs.push_back({"alpha", {1, 2}, [](float* v) { v[0] = -1.5f; v[1] = 0.25f; }});
  outputs.push_back({"mid", {}, [](float* v) { v[0] = 7; }});
  write_safetensors_f32(path, outputs, {{"format", "pt"}});

  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));
  const nlohmann::ordered_json json = nlohmann::ordered_json::parse(header);
  std::vector<std::string> keys;
  for (const auto& item : json.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"__metadata__", "alpha", "mid", "zeta"}));
  EXPECT_EQ(json["__metadata__"]["format"], "pt");
  EXPECT_EQ(json["alpha"]["dtype"], "F32");
  EXPECT_EQ(json["alpha"]["shape"], nlohmann::ordered_json::parse("[1,2]"));
  EXPECT_EQ(json["alpha"]["data_offsets"], nlohmann::ordered_json::parse("[0,8]"));
  EXPECT_EQ(json["mid"]["shape"], nlohmann::ordered_json::parse("[]"));
  EXPECT_EQ(json["mid"]["data_offsets"], nlohmann::ordered_json::parse("[8,12]"));
  EXPECT_EQ(json["zeta"]["data_offsets"], nlohmann::ordered_json::parse("[12,24]"));
  EXPECT_EQ(bytes.substr(8 + n), f32_bytes({-1.5f, 0.25f, 7.0f, 1.0f, 2.0f, 3.0f}));

  SafetensorsReader reader(path);
  std::vector<float> zeta(3);
  reader.read_f32(*reader.find("zeta"), zeta.data());
  EXPECT_EQ(zeta, (std::vector<float>{1, 2, 3}));
}

TEST_F(SafetensorsTest, HeaderLengthProblemsAreRefused) {
  EXPECT_NE(open_error("1234").find("shorter than the 8-byte header length"), std::string::npos);
  // Beyond the file: one byte too many, and the largest uint64 (no wrap-around).
  const std::string good = assemble_safetensors({{"w", "F32", {1}, f32_bytes({1.0f})}});
  const std::string body = good.substr(8);
  EXPECT_NE(open_error(le64(body.size() + 1) + body).find("header length " +
                                                          std::to_string(body.size() + 1) +
                                                          " runs past the end of the file"),
            std::string::npos);
  EXPECT_NE(open_error(le64(~uint64_t{0}) + body).find("runs past the end of the file"),
            std::string::npos);
  EXPECT_NE(open_error(assemble_raw("", "")).find("invalid JSON"), std::string::npos);
  EXPECT_NE(open_error(assemble_raw("[1, 2]", "")).find("header is not a JSON object"),
            std::string::npos);
  EXPECT_NE(open_error(assemble_raw("{\"w\": ", "")).find("invalid JSON"), std::string::npos);
}

TEST_F(SafetensorsTest, BadEntriesAreRefusedNamingTheTensor) {
  const auto entry = [](const std::string& name, const std::string& body) {
    return "{\"" + name + "\":" + body + "}";
  };
  const std::string four = f32_bytes({1.0f});
  const struct {
    std::string header;
    std::string data;
    std::string expected;
  } cases[] = {
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       four + four, "duplicate key 'w'"},
      {entry("w", R"({"dtype":"F99","shape":[1],"data_offsets":[0,4]})"), four,
       "tensor 'w': unknown dtype \"F99\""},
      {entry("w", R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), four,
       "tensor 'w': shape [-1] is not an array of non-negative integers"},
      {entry("w", R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})"), four,
       "tensor 'w': shape [1.5] is not"},
      {entry("w", R"({"dtype":"F32","shape":[1]})"), four,
       "tensor 'w': the header entry has no 'data_offsets'"},
      {entry("w", R"({"dtype":"F32","shape":[1],"data_offsets":[0]})"), four,
       "tensor 'w': data_offsets [0] is not a pair"},
      {entry("w", R"({"dtype":"F32","shape":[1],"data_offsets":[4,0]})"), four,
       "tensor 'w': data_offsets [4, 0] end before they begin"},
      {entry("w", R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})"), four,
       "tensor 'w': data_offsets [0, 4] hold 4 bytes but shape [2] of F32 needs 8"},
      {entry("w", R"({"dtype":"F16","shape":[4294967296,4294967296],"data_offsets":[0,4]})"), four,
       "tensor 'w': shape [4294967296,4294967296] of F16 needs more than 2^64 bytes"},
      {entry("w", R"({"dtype":"F32","shape":[4294967296,0,4294967296],"data_offsets":[0,0]})"), "",
       ""},  // no bytes: fine
      // Truncated: the tensor ends beyond the data section.
      {entry("w", R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), four,
       "tensor 'w': data_offsets [0, 8] run past the end of the data section (4 bytes)"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       four + four, "tensor 'b': data_offsets [4, 8] overlap tensor 'a' [0, 8]"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       four + four + four, "tensor 'b': data_offsets [8, 12] leave bytes [4, 8)"},
      {entry("w", R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})"), four + four,
       "the data section is 8 bytes but its tensors end at byte 4"},
      {entry("w", R"("F32")"), four, "tensor 'w': the header entry is not an object"},
      {R"({"__metadata__":{"format":1},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       four, "__metadata__ 'format' is 1, not a string"},
  };
  for (const auto& c : cases) {
    if (c.expected.empty()) {
      EXPECT_NO_THROW(SafetensorsReader(file(assemble_raw(c.header, c.data)))) << c.header;
      continue;
    }
    const std::string message = open_error(assemble_raw(c.header, c.data));
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << "header " << c.header << "\nmessage: " << message << "\nexpected: " << c.expected;
  }
}

}  // namespace
}  // namespace gpt2
