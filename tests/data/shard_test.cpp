/**
 * @file shard_test.cpp
 * @brief Tests for data/shard.h: llm.c compatibility in both directions and every bad file.
 *
 * Compatibility is proven without trusting write_shard: llmc_shard_bytes() builds a file the
 * way llm.c's dev/data/data_common.py write_datafile does (np.zeros(256, int32) header with
 * [0]=20240520, [1]=1, [2]=len(toks), then np.uint16 tokens, all little-endian), byte by byte.
 * Each malformed file must give its own message that starts with the path and names the
 * problem.
 */
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/error.h"
#include "base/file_io.h"
#include "data/shard.h"
#include "test_fixtures.h"

namespace gpt2 {
namespace {

using testing::error_message;

using ::testing::HasSubstr;
using ::testing::StartsWith;

void put_le_int32(std::string& bytes, size_t offset, int32_t value) {
  const uint32_t u = static_cast<uint32_t>(value);
  for (int i = 0; i < 4; ++i) bytes[offset + i] = static_cast<char>((u >> (8 * i)) & 0xFF);
}

// A shard exactly as llm.c's write_datafile lays it out. The header fields can be overridden
// to build broken files.
std::string llmc_shard_bytes(const std::vector<uint16_t>& tokens, int32_t magic = 20240520,
                             int32_t version = 1, int64_t count = -1) {
  std::string bytes(1024, '\0');
  put_le_int32(bytes, 0, magic);
  put_le_int32(bytes, 4, version);
  put_le_int32(bytes, 8, static_cast<int32_t>(count >= 0 ? count : tokens.size()));
  for (uint16_t token : tokens) {
    bytes.push_back(static_cast<char>(token & 0xFF));
    bytes.push_back(static_cast<char>(token >> 8));
  }
  return bytes;
}

class ShardTest : public testing::ScratchDirTest {
 protected:
  ShardTest() : ScratchDirTest("gpt2_shard") {}

  std::string write_raw(const std::string& name, const std::string& bytes) const {
    const std::string file = dir_ + "/" + name;
    std::ofstream out(file, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good()) << "could not write " << file;
    return file;
  }
};

// Both the cheap header check and the full read must reject a bad file the same way.
std::string header_and_read_error(const std::string& file) {
  const std::string from_header = error_message([&] { read_shard_header(file); });
  const std::string from_read = error_message([&] { read_shard(file, 0); });
  EXPECT_EQ(from_header, from_read);
  return from_header;
}

std::vector<uint16_t> sample_tokens() {
  // Extremes of uint16 and of the GPT-2 vocabulary, plus both byte orders distinguishable.
  return {0, 1, 255, 256, 0x1234, 50256, 65535, 7};
}

TEST_F(ShardTest, WriteThenReadRoundTrips) {
  const std::string file = dir_ + "/round.bin";
  std::vector<uint16_t> tokens = sample_tokens();
  for (int i = 0; i < 100000; ++i) tokens.push_back(static_cast<uint16_t>(i * 7919));
  write_shard(file, tokens);
  EXPECT_EQ(read_shard_header(file).num_tokens, static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(read_shard_header(file).path, file);
  EXPECT_EQ(read_shard(file, 0), tokens);
}

TEST_F(ShardTest, EmptyShardRoundTrips) {
  const std::string file = dir_ + "/empty.bin";
  write_shard(file, {});
  EXPECT_EQ(read_shard_header(file).num_tokens, 0);
  EXPECT_TRUE(read_shard(file, 50257).empty());
}

TEST_F(ShardTest, WriteShardPutsHeaderFieldsAndTokensAtLlmcByteOffsets) {
  const std::string file = dir_ + "/layout.bin";
  const std::vector<uint16_t> tokens = sample_tokens();
  write_shard(file, tokens);
  const std::vector<char> raw = read_file_bytes(file);
  const auto byte = [&](size_t i) {
    return static_cast<unsigned>(static_cast<unsigned char>(raw[i]));
  };
  const auto le32 = [&](size_t i) {
    return static_cast<int32_t>(byte(i) | byte(i + 1) << 8 | byte(i + 2) << 16 | byte(i + 3) << 24);
  };
  ASSERT_EQ(raw.size(), 1024 + 2 * tokens.size());
  EXPECT_EQ(le32(0), 20240520);
  EXPECT_EQ(le32(4), 1);
  EXPECT_EQ(le32(8), static_cast<int32_t>(tokens.size()));
  for (size_t i = 12; i < 1024; ++i) ASSERT_EQ(byte(i), 0u) << "header byte " << i;
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(byte(1024 + 2 * i) | byte(1025 + 2 * i) << 8, tokens[i]) << "token " << i;
  }
  // And the whole file is byte-identical to what llm.c's script writes.
  EXPECT_EQ(std::string(raw.begin(), raw.end()), llmc_shard_bytes(tokens));
}

TEST_F(ShardTest, LlmcShardLoadsUnchanged) {
  std::vector<uint16_t> tokens = sample_tokens();
  for (int i = 0; i < 3000; ++i) tokens.push_back(static_cast<uint16_t>((i * 40503) % 50257));
  const std::string file = write_raw("llmc.bin", llmc_shard_bytes(tokens));
  EXPECT_EQ(read_shard_header(file).num_tokens, static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(read_shard(file, 0), tokens);
}

TEST_F(ShardTest, WriteShardReplacesAtomicallyAndLeavesNoTemporary) {
  const std::string file = dir_ + "/over.bin";
  write_shard(file, {1, 2, 3});
  write_shard(file, {9, 8});
  EXPECT_EQ(read_shard(file, 0), (std::vector<uint16_t>{9, 8}));
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(ShardTest, WriteShardIntoAMissingFolderNamesTheFile) {
  const std::string file = dir_ + "/missing/x.bin";
  EXPECT_THAT(error_message([&] { write_shard(file, {1}); }), StartsWith(file + ": "));
}

TEST_F(ShardTest, MissingFile) {
  const std::string file = dir_ + "/nope.bin";
  EXPECT_EQ(header_and_read_error(file), file + ": no such file");
}

TEST_F(ShardTest, WrongMagic) {
  const std::string file = write_raw("magic.bin", llmc_shard_bytes({1, 2}, 12345));
  const std::string message = header_and_read_error(file);
  EXPECT_EQ(message, file + ": bad magic 12345 (expected 20240520): not a token shard");
}

TEST_F(ShardTest, TextFileIsNotAShard) {
  const std::string file = write_raw("notes.txt", std::string(2000, 'a'));
  const std::string message = header_and_read_error(file);
  EXPECT_THAT(message, StartsWith(file + ": bad magic "));
  EXPECT_THAT(message, HasSubstr("not a token shard"));
}

TEST_F(ShardTest, WrongVersion) {
  const std::string file = write_raw("v3.bin", llmc_shard_bytes({1, 2}, 20240520, 3));
  const std::string message = header_and_read_error(file);
  EXPECT_THAT(message, StartsWith(file + ": unsupported shard version 3 (expected 1)"));
}

TEST_F(ShardTest, Llama3VersionIsExplained) {
  const std::string file = write_raw("v2.bin", llmc_shard_bytes({1, 2}, 20240520, 2));
  const std::string message = header_and_read_error(file);
  EXPECT_THAT(message, StartsWith(file + ": unsupported shard version 2"));
  EXPECT_THAT(message, HasSubstr("uint32 tokens"));
}

TEST_F(ShardTest, NegativeTokenCount) {
  const std::string file = write_raw("neg.bin", llmc_shard_bytes({}, 20240520, 1, 0xFFFFFFFFll));
  const std::string message = header_and_read_error(file);
  EXPECT_THAT(message, StartsWith(file + ": "));
  EXPECT_THAT(message, HasSubstr("negative token count -1"));
}

TEST_F(ShardTest, TruncatedFile) {
  std::string bytes = llmc_shard_bytes(std::vector<uint16_t>(1000, 5));
  bytes.resize(2050);  // cut in the middle of the tokens
  const std::string file = write_raw("cut.bin", bytes);
  EXPECT_EQ(header_and_read_error(file),
            file + ": file is 2050 bytes but the header promises 1000 tokens (3024 bytes): "
                   "truncated?");
}

TEST_F(ShardTest, TrailingBytes) {
  std::string bytes = llmc_shard_bytes({1, 2, 3});
  bytes += "xyz";
  const std::string file = write_raw("long.bin", bytes);
  const std::string message = header_and_read_error(file);
  EXPECT_THAT(message, StartsWith(file + ": file is 1033 bytes but the header promises 3 tokens "
                                         "(1030 bytes)"));
  EXPECT_THAT(message, HasSubstr("trailing bytes"));
}

TEST_F(ShardTest, FileShorterThanTheHeader) {
  const std::string file = write_raw("stub.bin", llmc_shard_bytes({}).substr(0, 100));
  const std::string message = header_and_read_error(file);
  EXPECT_THAT(message, StartsWith(file + ": file is 100 bytes"));
  EXPECT_THAT(message, HasSubstr("1024-byte shard header"));
}

TEST_F(ShardTest, TokenAtOrAboveVocabSizeNamesFileIndexValueAndVocab) {
  const std::string file = write_raw("vocab.bin", llmc_shard_bytes({10, 50256, 3, 50257, 4}));
  EXPECT_EQ(read_shard_header(file).num_tokens, 5) << "the header check does not read tokens";
  EXPECT_EQ(read_shard(file, 0).size(), 5u) << "vocab_size 0 skips the check";
  EXPECT_EQ(read_shard(file, 50258).size(), 5u) << "the largest id is vocab_size - 1";
  const std::string message = error_message([&] { read_shard(file, 50257); });
  EXPECT_THAT(message, StartsWith(file + ": token 50257 at index 3 "));
  EXPECT_THAT(message, HasSubstr("vocab size 50257"));
}

}  // namespace
}  // namespace gpt2
