/**
 * @file safetensors_test_util.h
 * @brief safetensors files assembled byte by byte in the tests, independently of
 *        model/safetensors.h: the header is typed as text, the offsets are counted here.
 *
 * HandTensor holds a tensor's name, dtype string, shape and raw little-endian bytes;
 * assemble_safetensors() lays them out in the given order the way the format says (8-byte
 * length, JSON header padded with spaces to 8 bytes, data) and returns the file's bytes.
 * Also: raw bytes of fp32 / bf16 / half values and a scratch folder per test.
 */
#pragma once

#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace gpt2::testing {

struct HandTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", ...
  std::vector<int64_t> shape;
  std::string bytes;  // little-endian raw data
};

inline std::string le64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xFF);
  return bytes;
}

inline std::string f32_bytes(const std::vector<float>& values) {
  std::string bytes(values.size() * 4, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<char>((bits >> (8 * b)) & 0xFF);
  }
  return bytes;
}

inline std::string u16_bytes(const std::vector<uint16_t>& values) {
  std::string bytes(values.size() * 2, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    bytes[2 * i] = static_cast<char>(values[i] & 0xFF);
    bytes[2 * i + 1] = static_cast<char>(values[i] >> 8);
  }
  return bytes;
}

/// Half bits of a value exactly representable as a normal half or zero (the tests' values are
/// k/64 with |k| < 2048), worked out with frexp rather than bit tricks on floats.
inline uint16_t exact_half_bits(float value) {
  if (value == 0.0f) return std::signbit(value) ? 0x8000 : 0;
  int exponent = 0;
  const double mantissa = std::frexp(std::fabs(static_cast<double>(value)), &exponent);  // [0.5, 1)
  const double fraction = mantissa * 2.0 - 1.0;  // value = (1 + fraction) * 2^(exponent - 1)
  const int biased = exponent - 1 + 15;
  const double scaled = fraction * 1024.0;
  EXPECT_TRUE(biased >= 1 && biased <= 30 && scaled == std::floor(scaled)) << value;
  return static_cast<uint16_t>((value < 0 ? 0x8000 : 0) | (biased << 10) |
                               static_cast<int>(scaled));
}

/// bf16 bits of a value exactly representable in bf16 (its float's top 16 bits).
inline uint16_t exact_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  EXPECT_EQ(bits & 0xFFFFu, 0u) << value;
  return static_cast<uint16_t>(bits >> 16);
}

inline std::string shape_json(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

/// The bytes of a safetensors file holding tensors in the given data order. metadata_json, when
/// not empty, is written as the value of "__metadata__" (first).
inline std::string assemble_safetensors(const std::vector<HandTensor>& tensors,
                                        const std::string& metadata_json = "") {
  std::string header = "{";
  if (!metadata_json.empty()) header += "\"__metadata__\":" + metadata_json;
  std::string data;
  for (const HandTensor& tensor : tensors) {
    if (header.size() > 1) header += ",";
    header += "\"" + tensor.name + "\":{\"dtype\":\"" + tensor.dtype + "\",\"shape\":" +
              shape_json(tensor.shape) + ",\"data_offsets\":[" + std::to_string(data.size()) +
              "," + std::to_string(data.size() + tensor.bytes.size()) + "]}";
    data += tensor.bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  return le64(header.size()) + header + data;
}

/// A file with the given header text (unpadded) and data bytes.
inline std::string assemble_raw(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::string bytes(static_cast<size_t>(std::max<std::streamoff>(in.tellg(), 0)), '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

/// A fresh folder for the running test, removed by the caller (or left in the temp folder).
inline std::string scratch_folder(const char* tag) {
  const std::string folder =
      (std::filesystem::path(::testing::TempDir()) /
       (std::string("gpt2_") + tag + "_" + std::to_string(::getpid()) + "_" +
        ::testing::UnitTest::GetInstance()->current_test_info()->name()))
          .string();
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder;
}

}  // namespace gpt2::testing
