/**
 * @file tokenizer.h
 * @brief GPT-2 byte-level BPE tokenizer, giving exactly the ids of OpenAI's GPT-2 encoder.
 *
 * encode(): pre-tokenize the UTF-8 text with GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (Unicode letter, number and white-space classes from generated tables), map each piece's
 * bytes through the byte-to-unicode table, apply the BPE merges by rank and look the
 * resulting symbols up in encoder.json. decode() maps ids back to bytes; decode(encode(s)) == s
 * for any byte string (invalid UTF-8 bytes are pre-tokenized as single "other" characters).
 * Special tokens are not parsed from text: "<|endoftext|>" in text encodes as plain text; the
 * end-of-text id is kEndOfText.
 * The BPE cache makes encode() non-const-safe across threads: use one tokenizer per thread.
 */
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gpt2 {

class Gpt2Tokenizer {
 public:
  static constexpr int kEndOfText = 50256;

  /// Loads encoder.json and vocab.bpe; throws gpt2::Error naming the file on any problem.
  Gpt2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path);

  /// From tokenizer_dir() (see paths.h).
  static Gpt2Tokenizer from_default_files();

  std::vector<int> encode(std::string_view text);
  std::string decode(const std::vector<int>& ids) const;
  /// Bytes of one token; throws gpt2::Error for an id outside [0, vocab_size()).
  std::string decode_token(int id) const;
  int vocab_size() const { return static_cast<int>(id_to_bytes_.size()); }

 private:
  /// A merge of the adjacent symbols (left, right), keyed by (left id << 32 | right id).
  struct Merge {
    int rank;       // line order in vocab.bpe: lower merges first
    int merged_id;  // id of the symbol left + right
  };

  /// Appends the ids of one pre-tokenized piece (raw bytes) to out.
  void encode_piece(std::string_view piece, std::vector<int>& out);
  /// Appends the BPE ids of one piece to out.
  void bpe(std::string_view piece, std::vector<int>& out) const;

  std::vector<std::string> id_to_bytes_;      // id -> raw bytes
  int byte_to_id_[256] = {};                  // single byte -> its one-byte token
  std::unordered_map<uint64_t, Merge> merges_;
  std::unordered_map<std::string, std::vector<int>> cache_;  // piece bytes -> ids
};

/// GPT-2 pre-tokenization of UTF-8 text into pieces (exposed for tests).
std::vector<std::string> gpt2_pretokenize(std::string_view text);

}  // namespace gpt2
