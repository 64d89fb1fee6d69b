/**
 * @file shard.cpp
 * @brief llm.c token shards: header validation, whole-shard reads, atomic writes.
 *
 * Layout (llm.c dev/data/data_common.py write_datafile, GPT-2 flavour): 256 little-endian
 * int32 (magic 20240520, version 1, token count N, the rest zero) = 1024 bytes, then N
 * little-endian uint16 tokens; the file is exactly 1024 + 2*N bytes. Bytes are decoded one
 * by one, so the code is correct on any host byte order.
 * Every error message starts with "<path>: " and says what is wrong in plain words. The header
 * and the file size are checked from one open file descriptor, so the size we validate is the
 * size of the file we then read.
 */
#include "data/shard.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "base/file_io.h"

namespace gpt2 {
namespace {

constexpr int64_t kHeaderBytes = kShardHeaderInts * 4;
// llm.c version 2 shards hold uint32 tokens (LLaMA 3); naming it makes the error actionable.
constexpr int32_t kUint32ShardVersion = 2;

int32_t decode_le_int32(const unsigned char* bytes) {
  const uint32_t u = static_cast<uint32_t>(bytes[0]) | (static_cast<uint32_t>(bytes[1]) << 8) |
                     (static_cast<uint32_t>(bytes[2]) << 16) |
                     (static_cast<uint32_t>(bytes[3]) << 24);
  int32_t value;
  std::memcpy(&value, &u, sizeof(value));
  return value;
}

void encode_le_int32(int32_t value, unsigned char* bytes) {
  uint32_t u;
  std::memcpy(&u, &value, sizeof(u));
  for (int i = 0; i < 4; ++i) bytes[i] = static_cast<unsigned char>(u >> (8 * i));
}

// Reads and validates the header from the file's start; leaves the stream at the tokens.
ShardHeader read_and_check_header(InputFile& file, const std::string& path) {
  const auto size = static_cast<int64_t>(file.size());
  if (size < kHeaderBytes) {
    GPT2_FAIL(path, ": file is ", size, " bytes, shorter than the ", kHeaderBytes,
              "-byte shard header: not a token shard (or truncated)");
  }
  unsigned char header[kHeaderBytes];
  file.read_exactly(header, sizeof(header), "the header");
  const int32_t magic = decode_le_int32(header + 0);
  const int32_t version = decode_le_int32(header + 4);
  const int32_t count = decode_le_int32(header + 8);
  if (magic != kShardMagic) {
    GPT2_FAIL(path, ": bad magic ", magic, " (expected ", kShardMagic, "): not a token shard");
  }
  if (version != kShardVersion) {
    GPT2_FAIL(path, ": unsupported shard version ", version, " (expected ", kShardVersion, ")",
              version == kUint32ShardVersion ? ": version 2 holds uint32 tokens (LLaMA 3), "
                                               "GPT-2 shards are version 1"
                                             : "");
  }
  if (count < 0) GPT2_FAIL(path, ": header has a negative token count ", count, ": corrupt shard");
  const int64_t expected_bytes = kHeaderBytes + 2 * static_cast<int64_t>(count);
  if (size != expected_bytes) {
    GPT2_FAIL(path, ": file is ", size, " bytes but the header promises ", count,
              " tokens (", expected_bytes, " bytes): ",
              size < expected_bytes ? "truncated?" : "trailing bytes after the tokens");
  }
  ShardHeader result;
  result.path = path;
  result.num_tokens = count;
  return result;
}

}  // namespace

ShardHeader read_shard_header(const std::string& path) {
  InputFile file(path);
  return read_and_check_header(file, path);
}

std::vector<uint16_t> read_shard(const std::string& path, int vocab_size) {
  InputFile file(path);
  const ShardHeader header = read_and_check_header(file, path);
  const size_t count = static_cast<size_t>(header.num_tokens);

  std::vector<unsigned char> bytes(2 * count);
  if (count > 0) file.read_exactly(bytes.data(), bytes.size(), "the tokens");
  std::vector<uint16_t> tokens(count);
  for (size_t i = 0; i < count; ++i) {
    tokens[i] = static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
  }
  if (vocab_size > 0) {
    for (size_t i = 0; i < count; ++i) {
      if (tokens[i] >= vocab_size) {
        GPT2_FAIL(path, ": token ", tokens[i], " at index ", i, " is out of range for vocab size ",
                  vocab_size, " (ids must be < ", vocab_size,
                  "): shard made with another tokenizer?");
      }
    }
  }
  return tokens;
}

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    GPT2_FAIL(path, ": ", tokens.size(), " tokens do not fit one shard (the header's int32 count "
              "allows at most ", std::numeric_limits<int32_t>::max(), "): split into shards");
  }
  unsigned char header[kHeaderBytes] = {};
  encode_le_int32(kShardMagic, header + 0);
  encode_le_int32(kShardVersion, header + 4);
  encode_le_int32(static_cast<int32_t>(tokens.size()), header + 8);

  AtomicFileWriter writer(path);
  writer.write(header, sizeof(header));
  // Encode in bounded chunks: byte order stays explicit without doubling peak memory.
  constexpr size_t kChunkTokens = size_t{1} << 16;
  std::vector<unsigned char> chunk(2 * kChunkTokens);
  for (size_t begin = 0; begin < tokens.size(); begin += kChunkTokens) {
    const size_t n = std::min(kChunkTokens, tokens.size() - begin);
    for (size_t i = 0; i < n; ++i) {
      chunk[2 * i] = static_cast<unsigned char>(tokens[begin + i] & 0xFF);
      chunk[2 * i + 1] = static_cast<unsigned char>(tokens[begin + i] >> 8);
    }
    writer.write(chunk.data(), 2 * n);
  }
  writer.commit();
}

}  // namespace gpt2
