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
  std::vector<int> bpe(const std::string& symbols_utf8);

  std::unordered_map<std::string, int> encoder_;     // BPE symbol string (UTF-8) -> id
  std::vector<std::string> id_to_bytes_;             // id -> raw bytes
  std::unordered_map<std::string, int> merge_ranks_; // "left\x01right" -> rank
  std::string byte_to_symbol_[256];                  // byte -> UTF-8 of its unicode stand-in
  std::unordered_map<std::string, std::vector<int>> cache_;
};

/// GPT-2 pre-tokenization of UTF-8 text into pieces (exposed for tests).
std::vector<std::string> gpt2_pretokenize(std::string_view text);

}  // namespace gpt2
