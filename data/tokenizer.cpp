/**
 * @file tokenizer.cpp
 * @brief GPT-2 byte-level BPE: pre-tokenizer, encoder.json / vocab.bpe loaders, BPE, decode.
 *
 * Reference: OpenAI's gpt-2 encoder.py. Symbols are handled as token ids, never as strings:
 * every symbol that BPE can form is in encoder.json (the loader checks each merge's parts and
 * result), so a merge is the tuple (left id, right id) -> (rank, merged id). Keying merges by
 * the tuple is what encoder.py does; gpt-3-encoder's Encoder.js keys them by the string
 * "left,right", which collides when a symbol holds a comma. With the GPT-2 vocabulary every
 * colliding pair is unreachable: each one needs a lone comma to merge with one neighbour
 * before a lower-ranked merge with its other neighbour, so both keyings give the same ids
 * (tools/make_tokenizer_fixtures.js re-checks this on every fixture).
 *
 * BPE merges the lowest-ranked adjacent pair everywhere (left to right, non-overlapping)
 * until none is left. Here the symbols sit at the slot of their first byte in one int32 array,
 * and the rank of the pair starting at each slot in another, searchable for the leftmost slot of
 * a given rank (PairRanks: a segment tree over blocks of 32 slots); one rank's pairs are merged
 * left to right as a batch, and the pairs the batch formed count from the next batch on, which
 * reproduces encoder.py's order in O(n log n) for a piece of n bytes with about 8 bytes of
 * working memory per byte: a 50 MB piece (a line of letters without spaces) tokenizes in about
 * 10 times its size, the text and the ids included.
 */
#include "data/tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <unordered_set>

#include "base/error.h"
#include "base/file_io.h"
#include "base/json.h"
#include "data/paths.h"
#include "data/unicode_classes.h"

namespace gpt2 {
namespace {

// Pieces longer than this are rare and not worth the memory of caching them.
constexpr size_t kMaxCachedPieceBytes = 256;
// GPT-2's encoder.json is 1 MB and vocab.bpe 456 KB; a vocabulary file beyond this is not one.
constexpr size_t kMaxVocabularyFileBytes = size_t{64} << 20;
// The cache is dropped when it reaches this many pieces, so memory stays bounded.
constexpr size_t kMaxCachedPieces = 1 << 20;

// ---------------------------------------------------------------------------------------------
// UTF-8

/// Appends the UTF-8 encoding of code point cp (at most 0x10FFFF) to out.
void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

struct Utf8Char {
  uint32_t code_point;  // meaningless when !valid
  int length;           // bytes; 1 for an invalid byte
  bool valid;
};

/// The character starting at text[pos]. A byte that does not start a well-formed sequence
/// (stray continuation, overlong form, surrogate, > U+10FFFF, truncated) is one invalid char.
Utf8Char next_utf8_char(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(pos);
  if (b0 < 0x80) return {b0, 1, true};
  int length;
  uint32_t cp;
  uint32_t min_cp;
  if ((b0 & 0xE0) == 0xC0) {
    length = 2, cp = b0 & 0x1F, min_cp = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, cp = b0 & 0x0F, min_cp = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, cp = b0 & 0x07, min_cp = 0x10000;
  } else {
    return {0, 1, false};
  }
  if (pos + length > text.size()) return {0, 1, false};
  for (int k = 1; k < length; ++k) {
    const uint8_t b = byte(pos + k);
    if ((b & 0xC0) != 0x80) return {0, 1, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {0, 1, false};
  return {cp, length, true};
}


CharClass class_of(const Utf8Char& c) {
  return c.valid ? char_class(c.code_point) : CharClass::kOther;
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenization:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+

/// End of the run of characters of class cls that starts at pos.
size_t end_of_run(std::string_view text, size_t pos, CharClass cls) {
  while (pos < text.size()) {
    const Utf8Char c = next_utf8_char(text, pos);
    if (class_of(c) != cls) break;
    pos += c.length;
  }
  return pos;
}

/// End of the pattern's match at pos (< text.size()); the alternatives in the pattern's order.
size_t end_of_match(std::string_view text, size_t pos) {
  const size_t n = text.size();
  if (text[pos] == '\'' && pos + 1 < n) {
    const char c1 = text[pos + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
    if (pos + 2 < n) {
      const char c2 = text[pos + 2];
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
        return pos + 3;
      }
    }
  }
  const Utf8Char first = next_utf8_char(text, pos);
  const CharClass first_class = class_of(first);
  if (first_class != CharClass::kSpace) return end_of_run(text, pos, first_class);

  // " ?X+": a literal U+0020 joins the letter/number/other run right after it.
  if (text[pos] == ' ' && pos + 1 < n) {
    const CharClass next_class = class_of(next_utf8_char(text, pos + 1));
    if (next_class != CharClass::kSpace) return end_of_run(text, pos + 1, next_class);
  }
  // "\s+(?!\S)" backtracks to leave the run's last white-space character to the following
  // non-space; a lone white-space character before a non-space falls through to "\s+".
  size_t last_start = pos;
  size_t end = pos;
  int run_chars = 0;
  while (end < n) {
    const Utf8Char c = next_utf8_char(text, end);
    if (class_of(c) != CharClass::kSpace) break;
    last_start = end;
    end += c.length;
    ++run_chars;
  }
  if (end == n || run_chars == 1) return end;
  return last_start;
}

/// Calls emit(piece) for each pre-tokenized piece of text, in order.
template <typename Emit>
void for_each_piece(std::string_view text, Emit&& emit) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = end_of_match(text, pos);
    emit(text.substr(pos, end - pos));
    pos = end;
  }
}

// ---------------------------------------------------------------------------------------------
// Vocabulary files

/// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68
/// bytes get U+0100.. in byte order, so every BPE symbol is printable, space-free text.
void build_byte_to_code_point(uint32_t byte_to_cp[256]) {
  const auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  uint32_t next_extra = 256;
  for (int b = 0; b < 256; ++b) byte_to_cp[b] = printable(b) ? b : next_extra++;
}

/// encoder.json: one object of symbol -> token id (a non-negative integer); the entries come
/// back sorted by symbol (ids are explicit, so order does not matter). A key given twice is an
/// error (JSON parsers would keep one silently).
std::vector<std::pair<std::string, int64_t>> read_encoder_json(const std::string& path) {
  const std::string text = read_file_text(path, kMaxVocabularyFileBytes);
  std::string duplicate;
  const nlohmann::json::parser_callback_t find_duplicates =
      [seen = std::unordered_set<std::string>(), &duplicate](
          int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) mutable {
        if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
            !seen.insert(parsed.get<std::string>()).second && duplicate.empty())
          duplicate = parsed.get<std::string>();
        return true;
      };
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(text, find_duplicates);
  } catch (const nlohmann::json::exception& e) {
    GPT2_FAIL(path, ": invalid JSON: ", e.what());
  }
  if (!object.is_object()) GPT2_FAIL(path, ": expected one JSON object of token ids");
  if (!duplicate.empty()) GPT2_FAIL(path, ": token \"", duplicate, "\" appears twice");
  std::vector<std::pair<std::string, int64_t>> entries;
  entries.reserve(object.size());
  for (const auto& [symbol, id] : object.items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > INT32_MAX)
      GPT2_FAIL(path, ": the id of token \"", symbol, "\" is ", id.dump(),
                ", not a token id (an integer in [0, 2^31))");
    entries.emplace_back(symbol, id.get<int64_t>());
  }
  return entries;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Gpt2Tokenizer

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& encoder_json_path,
                             const std::string& vocab_bpe_path) {
  uint32_t byte_to_cp[256];
  build_byte_to_code_point(byte_to_cp);
  std::unordered_map<uint32_t, uint8_t> cp_to_byte;
  for (int b = 0; b < 256; ++b) cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);

  // encoder.json: symbol (text over the byte alphabet) -> id; ids must be exactly 0..N-1.
  const auto entries = read_encoder_json(encoder_json_path);
  if (entries.empty()) GPT2_FAIL(encoder_json_path, ": no tokens");
  std::unordered_map<std::string, int> symbol_to_id;
  symbol_to_id.reserve(entries.size());
  id_to_bytes_.assign(entries.size(), std::string());
  std::vector<bool> id_seen(entries.size(), false);
  for (const auto& [symbol, id] : entries) {
    if (id >= static_cast<int64_t>(entries.size())) {
      GPT2_FAIL(encoder_json_path, ": token id ", id, " is not below the token count ",
                entries.size(), " (ids must be 0..N-1)");
    }
    if (id_seen[id]) GPT2_FAIL(encoder_json_path, ": token id ", id, " appears twice");
    symbol_to_id.emplace(symbol, static_cast<int>(id));
    id_seen[id] = true;
    std::string bytes;
    for (size_t pos = 0; pos < symbol.size();) {
      const Utf8Char c = next_utf8_char(symbol, pos);
      const auto it = c.valid ? cp_to_byte.find(c.code_point) : cp_to_byte.end();
      if (it == cp_to_byte.end()) {
        GPT2_FAIL(encoder_json_path, ": token \"", symbol,
                  "\" has a character outside GPT-2's byte alphabet");
      }
      bytes += static_cast<char>(it->second);
      pos += c.length;
    }
    id_to_bytes_[id] = std::move(bytes);
  }
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    append_utf8(byte_to_cp[b], symbol);
    const auto it = symbol_to_id.find(symbol);
    if (it == symbol_to_id.end()) {
      GPT2_FAIL(encoder_json_path, ": no token for the single byte ", b);
    }
    byte_to_id_[b] = it->second;
  }

  // vocab.bpe: "#version" line, then one "left right" merge per line, highest priority first.
  const std::string bpe_text = read_file_text(vocab_bpe_path, kMaxVocabularyFileBytes);
  size_t pos = 0;
  int64_t line_number = 0;
  int rank = 0;
  while (pos < bpe_text.size()) {
    size_t end = bpe_text.find('\n', pos);
    if (end == std::string::npos) end = bpe_text.size();
    const std::string_view line(bpe_text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (line_number == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty() && pos >= bpe_text.size()) break;  // the file's final newline
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 >= line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      GPT2_FAIL(vocab_bpe_path, ": line ", line_number, ": expected \"left right\", got \"",
                line, "\"");
    }
    const std::string left(line.substr(0, space));
    const std::string right(line.substr(space + 1));
    const auto left_it = symbol_to_id.find(left);
    const auto right_it = symbol_to_id.find(right);
    const auto merged_it = symbol_to_id.find(left + right);
    if (left_it == symbol_to_id.end() || right_it == symbol_to_id.end() ||
        merged_it == symbol_to_id.end()) {
      GPT2_FAIL(vocab_bpe_path, ": line ", line_number, ": merge \"", line,
                "\" uses or makes a symbol missing from ", encoder_json_path);
    }
    const uint64_t key = (static_cast<uint64_t>(left_it->second) << 32) |
                         static_cast<uint32_t>(right_it->second);
    // A repeated merge keeps its last rank, as dict(zip(merges, range(...))) in encoder.py.
    merges_[key] = Merge{rank++, merged_it->second};
  }
  if (merges_.empty()) GPT2_FAIL(vocab_bpe_path, ": no merges");
}

Gpt2Tokenizer Gpt2Tokenizer::from_default_files() {
  const std::string dir = tokenizer_dir();
  return Gpt2Tokenizer(dir + "/encoder.json", dir + "/vocab.bpe");
}

namespace {

constexpr uint32_t kNoRank = UINT32_MAX;  // no merge for this pair (or no pair here)
constexpr int32_t kInsideSymbol = -1;     // a byte that is not the first of its symbol

/// The rank of the pair starting at each slot of a piece, searchable for "the leftmost slot at or
/// after `from` whose rank is at most `bound`" and updatable slot by slot, in O(log n). Slots are
/// grouped in blocks of kBlock; a segment tree over the blocks holds their minimum ranks. Memory:
/// 4 bytes per slot (the ranks) plus 8 bytes per block.
class PairRanks {
 public:
  static constexpr size_t kNotFound = SIZE_MAX;

  explicit PairRanks(size_t slots)
      : ranks_(slots, kNoRank), leaves_(1) {
    while (leaves_ * kBlock < slots) leaves_ *= 2;
    tree_.assign(2 * leaves_, kNoRank);
  }

  uint32_t operator[](size_t slot) const { return ranks_[slot]; }
  uint32_t min() const { return tree_[1]; }

  /// Sets every slot's rank; O(n).
  template <typename RankOf>
  void fill(RankOf&& rank_of) {
    for (size_t slot = 0; slot < ranks_.size(); ++slot) ranks_[slot] = rank_of(slot);
    for (size_t block = 0; block * kBlock < ranks_.size(); ++block)
      tree_[leaves_ + block] = block_min(block);
    for (size_t node = leaves_ - 1; node >= 1; --node)
      tree_[node] = std::min(tree_[2 * node], tree_[2 * node + 1]);
  }

  void set(size_t slot, uint32_t rank) {
    if (ranks_[slot] == rank) return;
    ranks_[slot] = rank;
    size_t node = leaves_ + slot / kBlock;
    tree_[node] = block_min(slot / kBlock);
    for (node /= 2; node >= 1; node /= 2) {
      const uint32_t m = std::min(tree_[2 * node], tree_[2 * node + 1]);
      if (tree_[node] == m) break;  // nothing above changes either
      tree_[node] = m;
    }
  }

  size_t find_first(size_t from, uint32_t bound) const {
    if (from >= ranks_.size()) return kNotFound;
    const size_t block = from / kBlock;
    const size_t found = scan(from, block, bound);
    if (found != kNotFound) return found;
    // The leftmost block after `block` whose minimum is at most bound: climb while the node is
    // a right child or its right sibling has nothing, then descend into that sibling.
    for (size_t node = leaves_ + block; node > 1; node /= 2) {
      if (node % 2 == 0 && tree_[node + 1] <= bound) {
        node += 1;
        while (node < leaves_) node = tree_[2 * node] <= bound ? 2 * node : 2 * node + 1;
        const size_t hit = node - leaves_;
        return scan(hit * kBlock, hit, bound);
      }
    }
    return kNotFound;
  }

 private:
  static constexpr size_t kBlock = 32;

  uint32_t block_min(size_t block) const {
    const size_t end = std::min(ranks_.size(), (block + 1) * kBlock);
    uint32_t m = kNoRank;
    for (size_t slot = block * kBlock; slot < end; ++slot) m = std::min(m, ranks_[slot]);
    return m;
  }

  size_t scan(size_t from, size_t block, uint32_t bound) const {
    const size_t end = std::min(ranks_.size(), (block + 1) * kBlock);
    for (size_t slot = from; slot < end; ++slot)
      if (ranks_[slot] <= bound) return slot;
    return kNotFound;
  }

  std::vector<uint32_t> ranks_;
  size_t leaves_;               // a power of two, at least the number of blocks
  std::vector<uint32_t> tree_;  // tree_[leaves_ + b]: min of block b; tree_[i]: min of 2i, 2i+1
};

}  // namespace

void Gpt2Tokenizer::bpe(std::string_view piece, std::vector<int>& out) const {
  // Symbols live at the slot of their first byte; the bytes after it hold kInsideSymbol. A
  // symbol's end is its start plus its token's length, and the symbol before slot s is found by
  // stepping back over kInsideSymbol bytes (at most the longest token's length).
  const size_t n = piece.size();
  std::vector<int32_t> symbol(n);
  for (size_t i = 0; i < n; ++i) symbol[i] = byte_to_id_[static_cast<uint8_t>(piece[i])];
  const auto end_of = [&](size_t slot) { return slot + id_to_bytes_[symbol[slot]].size(); };
  const auto find_merge = [&](size_t left) -> const Merge* {
    const size_t right = end_of(left);
    if (right >= n) return nullptr;
    const uint64_t key = (static_cast<uint64_t>(symbol[left]) << 32) |
                         static_cast<uint32_t>(symbol[right]);
    const auto it = merges_.find(key);
    return it == merges_.end() ? nullptr : &it->second;
  };
  const auto rank_at = [&](size_t slot) {
    const Merge* merge = find_merge(slot);
    return merge ? static_cast<uint32_t>(merge->rank) : kNoRank;
  };

  PairRanks ranks(n);
  ranks.fill(rank_at);
  // One pass per lowest rank present: its pairs left to right. Merging the pair at s kills the
  // slot of its right symbol and changes the pairs at s and at the symbol before s, all at or
  // left of s, so the rest of the pass (slots after s) sees the ranks it started with; the
  // pairs the pass formed only count from the next pass on, as in encoder.py.
  for (uint32_t rank = ranks.min(); rank != kNoRank; rank = ranks.min()) {
    for (size_t s = ranks.find_first(0, rank); s != PairRanks::kNotFound;
         s = ranks.find_first(s + 1, rank)) {
      const size_t right = end_of(s);
      symbol[s] = find_merge(s)->merged_id;
      symbol[right] = kInsideSymbol;
      ranks.set(right, kNoRank);
      ranks.set(s, rank_at(s));
      if (s > 0) {
        size_t before = s - 1;
        while (symbol[before] == kInsideSymbol) --before;
        ranks.set(before, rank_at(before));
      }
    }
  }
  size_t count = 0;
  for (size_t slot = 0; slot < n; slot = end_of(slot)) ++count;
  out.reserve(out.size() + count);  // exactly: no doubling of a large output
  for (size_t slot = 0; slot < n; slot = end_of(slot)) out.push_back(symbol[slot]);
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, std::vector<int>& out) {
  if (piece.size() == 1) {
    out.push_back(byte_to_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (piece.size() > kMaxCachedPieceBytes) {
    bpe(piece, out);
    return;
  }
  std::string key(piece);
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    if (cache_.size() >= kMaxCachedPieces) cache_.clear();
    std::vector<int> ids;
    bpe(piece, ids);
    it = cache_.emplace(std::move(key), std::move(ids)).first;
  }
  out.insert(out.end(), it->second.begin(), it->second.end());
}

std::vector<int> Gpt2Tokenizer::encode(std::string_view text) {
  std::vector<int> ids;
  for_each_piece(text, [&](std::string_view piece) { encode_piece(piece, ids); });
  return ids;
}

std::string Gpt2Tokenizer::decode_token(int id) const {
  if (id < 0 || id >= vocab_size()) {
    GPT2_FAIL("token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")");
  }
  return id_to_bytes_[id];
}

std::string Gpt2Tokenizer::decode(const std::vector<int>& ids) const {
  std::string text;
  for (const int id : ids) {
    if (id < 0 || id >= vocab_size()) {
      GPT2_FAIL("token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")");
    }
    text += id_to_bytes_[id];
  }
  return text;
}

std::vector<std::string> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string> pieces;
  for_each_piece(text, [&](std::string_view piece) { pieces.emplace_back(piece); });
  return pieces;
}

}  // namespace gpt2
