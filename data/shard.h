/**
 * @file shard.h
 * @brief Token shards in llm.c's format.
 *
 * A shard is a header of 256 little-endian int32 — [0] magic 20240520, [1] version 1,
 * [2] token count N — followed by N little-endian uint16 tokens. Shards written by llm.c's
 * data scripts load unchanged, and write_shard() output loads in llm.c.
 * Every problem throws gpt2::Error whose message starts with the file path and says what is
 * wrong: missing file, wrong magic, wrong version, negative count, file size that disagrees
 * with the header (truncated or trailing bytes), a token id >= vocab_size (with its index).
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpt2 {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr int kShardHeaderInts = 256;

struct ShardHeader {
  std::string path;
  int64_t num_tokens = 0;
};

/// Reads and validates the header and the file size only (cheap; for all shards at start).
ShardHeader read_shard_header(const std::string& path);

/// Reads and validates a whole shard. Tokens are checked against vocab_size when it is > 0.
std::vector<uint16_t> read_shard(const std::string& path, int vocab_size);

/// Writes a shard atomically. Throws when tokens.size() exceeds the int32 header field.
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace gpt2
