/**
 * @file tokenizer_test.cpp
 * @brief Gpt2Tokenizer against gpt-3-encoder's Encoder.js, plus round trips and error paths.
 *
 * tests/fixtures/tokenizer_cases.txt holds Encoder.js's ids for ~400 inputs (see the README
 * beside it); every one must match exactly. Round trips cover the fixtures and seeded random
 * byte strings full of invalid UTF-8. Pre-tokenization expectations are derived by hand from
 * the pattern. Vocabulary files come from GPT2_TEST_DATA_DIR/tokenizer.
 */
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "data/tokenizer.h"
#include "data/unicode_classes.h"

namespace gpt2 {
namespace {

const std::string kTokenizerDir = std::string(GPT2_TEST_DATA_DIR) + "/tokenizer";
const std::string kEncoderJson = kTokenizerDir + "/encoder.json";
const std::string kVocabBpe = kTokenizerDir + "/vocab.bpe";

struct FixtureCase {
  int line;
  std::string text;
  std::vector<int> ids;
};

std::string hex_decode(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return bytes;
}

std::string hex_encode(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (const char c : bytes) {
    hex += kDigits[static_cast<uint8_t>(c) >> 4];
    hex += kDigits[static_cast<uint8_t>(c) & 15];
  }
  return hex;
}

std::vector<FixtureCase> load_fixture_cases() {
  const std::string path = std::string(GPT2_TEST_FIXTURES_DIR) + "/tokenizer_cases.txt";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<FixtureCase> cases;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const size_t tab = line.find('\t');
    EXPECT_NE(tab, std::string::npos) << path << ":" << line_number << ": no TAB";
    if (tab == std::string::npos) continue;
    FixtureCase c{line_number, hex_decode(line.substr(0, tab)), {}};
    std::istringstream ids(line.substr(tab + 1));
    for (int id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tokenizer_ = new Gpt2Tokenizer(kEncoderJson, kVocabBpe); }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  static Gpt2Tokenizer* tokenizer_;
};
Gpt2Tokenizer* TokenizerTest::tokenizer_ = nullptr;

TEST_F(TokenizerTest, VocabularyHasGpt2Shape) {
  EXPECT_EQ(tokenizer_->vocab_size(), 50257);
  EXPECT_EQ(tokenizer_->decode_token(Gpt2Tokenizer::kEndOfText), "<|endoftext|>");
  // Every byte has a one-byte token, so any byte string is representable.
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    const std::vector<int> ids = tokenizer_->encode(byte);
    ASSERT_EQ(ids.size(), 1u) << "byte " << b;
    EXPECT_EQ(tokenizer_->decode_token(ids[0]), byte);
  }
}

TEST_F(TokenizerTest, MatchesEncoderJsOnEveryFixture) {
  const std::vector<FixtureCase> cases = load_fixture_cases();
  ASSERT_GE(cases.size(), 400u);
  int mismatches = 0;
  for (const FixtureCase& c : cases) {
    const std::vector<int> ids = tokenizer_->encode(c.text);
    if (ids != c.ids && ++mismatches <= 5) {
      ADD_FAILURE() << "fixture line " << c.line << " (input hex " << hex_encode(c.text)
                    << "): got " << ::testing::PrintToString(ids) << ", Encoder.js gives "
                    << ::testing::PrintToString(c.ids);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_F(TokenizerTest, SecondEncodeOfSameTextUsesCacheAndAgrees) {
  const std::string text = "the cache must not change the answer: the the the cache";
  const std::vector<int> first = tokenizer_->encode(text);
  EXPECT_EQ(tokenizer_->encode(text), first);
}

TEST_F(TokenizerTest, FixturesRoundTrip) {
  for (const FixtureCase& c : load_fixture_cases()) {
    EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(c.text)), c.text) << "fixture line " << c.line;
  }
}

TEST_F(TokenizerTest, RandomBytesIncludingInvalidUtf8RoundTrip) {
  // Fragments chosen to hit every branch of the UTF-8 decoder: valid 1-4 byte characters,
  // stray continuation bytes, overlong forms, surrogates, code points above U+10FFFF,
  // truncated sequences, bytes that never occur in UTF-8, and the pattern's own characters.
  const std::vector<std::string> fragments = {
      "a", "Z", "7", " ", "  ", "\n", "\t", "'", "'s", "'ll", ",", "!",
      "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xe3\x80\x80",
      "\x80", "\xbf", "\xc0\x80", "\xc1\xbf", "\xe0\x80\xaf", "\xed\xa0\x80",
      "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\xff", "\xfe", "\xc3", "\xe4\xb8",
      "\xf0\x9f\x98", "\x00"};
  Rng rng(1234);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    const uint64_t parts = rng.uniform_int(30);
    for (uint64_t p = 0; p < parts; ++p) {
      if (rng.uniform() < 0.3) {
        text += static_cast<char>(rng.uniform_int(256));  // any byte at all
      } else {
        text += fragments[rng.uniform_int(fragments.size())];
      }
    }
    const std::vector<int> ids = tokenizer_->encode(text);
    ASSERT_EQ(tokenizer_->decode(ids), text) << "input hex " << hex_encode(text);
    // Pre-tokenization partitions the input: its pieces concatenate back to it.
    std::string joined;
    for (const std::string& piece : gpt2_pretokenize(text)) {
      EXPECT_FALSE(piece.empty());
      joined += piece;
    }
    ASSERT_EQ(joined, text) << "input hex " << hex_encode(text);
  }
}

TEST_F(TokenizerTest, LongPiecesStayFastAndRoundTrip) {
  // One 200000-byte piece: a quadratic BPE would take minutes here.
  const std::string letters(200000, 'a');
  const std::vector<int> ids = tokenizer_->encode(letters);
  EXPECT_LT(ids.size(), letters.size() / 2);  // merges did happen
  EXPECT_EQ(tokenizer_->decode(ids), letters);
  std::string mixed;
  for (int i = 0; i < 20000; ++i) mixed += "abcdefghij"[i % 7];
  EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(mixed)), mixed);
}

TEST_F(TokenizerTest, EndOfTextTextIsNotTheSpecialToken) {
  const std::vector<int> ids = tokenizer_->encode("<|endoftext|>");
  EXPECT_GT(ids.size(), 1u);
  for (const int id : ids) EXPECT_NE(id, Gpt2Tokenizer::kEndOfText);
}

TEST_F(TokenizerTest, DecodeRejectsIdsOutsideVocabulary) {
  const int v = tokenizer_->vocab_size();
  EXPECT_THROW(tokenizer_->decode_token(-1), Error);
  EXPECT_THROW(tokenizer_->decode_token(v), Error);
  EXPECT_NO_THROW(tokenizer_->decode_token(v - 1));
  EXPECT_NO_THROW(tokenizer_->decode_token(0));
  EXPECT_THROW(tokenizer_->decode({15496, v}), Error);
  EXPECT_THROW(tokenizer_->decode({-7}), Error);
  try {
    tokenizer_->decode_token(v + 5);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(v + 5)), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenization, expectations derived from the pattern by hand

using Pieces = std::vector<std::string>;

TEST(Gpt2Pretokenize, SpacesJoinTheFollowingWordAndRunsLeaveTheirLastSpace) {
  EXPECT_EQ(gpt2_pretokenize("Hello  world"), (Pieces{"Hello", " ", " world"}));
  EXPECT_EQ(gpt2_pretokenize("  x"), (Pieces{" ", " x"}));
  EXPECT_EQ(gpt2_pretokenize("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(gpt2_pretokenize("trailing  "), (Pieces{"trailing", "  "}));
  EXPECT_EQ(gpt2_pretokenize(" "), (Pieces{" "}));
  EXPECT_EQ(gpt2_pretokenize(""), (Pieces{}));
}

TEST(Gpt2Pretokenize, NonSpaceWhiteSpaceNeverJoinsAWord) {
  // "\s+(?!\S)" gives back the last "\n"; the lone "\n" before "b" then matches "\s+".
  EXPECT_EQ(gpt2_pretokenize("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(gpt2_pretokenize("a \tb"), (Pieces{"a", " ", "\t", "b"}));
  EXPECT_EQ(gpt2_pretokenize("x \n y"), (Pieces{"x", " \n", " y"}));
  EXPECT_EQ(gpt2_pretokenize("a\r\nb"), (Pieces{"a", "\r", "\n", "b"}));
  EXPECT_EQ(gpt2_pretokenize("end\n\n"), (Pieces{"end", "\n\n"}));
  // Only U+0020 is the optional prefix; U+3000 is white space like "\t".
  EXPECT_EQ(gpt2_pretokenize("a\u3000\u3000b"), (Pieces{"a", "\u3000", "\u3000", "b"}));
}

TEST(Gpt2Pretokenize, ContractionsAreLowercaseApostropheSuffixes) {
  EXPECT_EQ(gpt2_pretokenize("it's"), (Pieces{"it", "'s"}));
  EXPECT_EQ(gpt2_pretokenize("we'll've"), (Pieces{"we", "'ll", "'ve"}));
  EXPECT_EQ(gpt2_pretokenize("I'M"), (Pieces{"I", "'", "M"}));
  EXPECT_EQ(gpt2_pretokenize("''s"), (Pieces{"''", "s"}));  // the punctuation run is greedy
  EXPECT_EQ(gpt2_pretokenize(".'s"), (Pieces{".'", "s"}));
  EXPECT_EQ(gpt2_pretokenize("'sa"), (Pieces{"'s", "a"}));
  EXPECT_EQ(gpt2_pretokenize("'r"), (Pieces{"'", "r"}));
}

TEST(Gpt2Pretokenize, LettersNumbersAndOthersFormSeparateRuns) {
  EXPECT_EQ(gpt2_pretokenize(" 42abc"), (Pieces{" 42", "abc"}));
  EXPECT_EQ(gpt2_pretokenize("a, b!!"), (Pieces{"a", ",", " b", "!!"}));
  EXPECT_EQ(gpt2_pretokenize("x2 ½"), (Pieces{"x", "2", " ½"}));
  // A combining mark is neither letter nor number.
  EXPECT_EQ(gpt2_pretokenize("e\u0301t\u00e9"), (Pieces{"e", "\u0301", "t\u00e9"}));
  const std::string mixed_letters = "\xce\xbb\xd0\xb6\xe4\xb8\xad";  // Greek, Cyrillic, CJK
  EXPECT_EQ(gpt2_pretokenize(mixed_letters), (Pieces{mixed_letters}));
}

TEST(Gpt2Pretokenize, InvalidBytesAreOtherCharacters) {
  EXPECT_EQ(gpt2_pretokenize("\xff\xfe" "ab"), (Pieces{"\xff\xfe", "ab"}));
  EXPECT_EQ(gpt2_pretokenize(" \x80!"), (Pieces{" \x80!"}));
  // A truncated 3-byte sequence is two invalid bytes, then the letter after them.
  EXPECT_EQ(gpt2_pretokenize("\xe4\xb8z"), (Pieces{"\xe4\xb8", "z"}));
}

TEST(UnicodeClasses, MatchJavaScriptRegexClasses) {
  EXPECT_EQ(char_class('A'), CharClass::kLetter);
  EXPECT_EQ(char_class('z'), CharClass::kLetter);
  EXPECT_EQ(char_class('5'), CharClass::kNumber);
  EXPECT_EQ(char_class(' '), CharClass::kSpace);
  EXPECT_EQ(char_class('\v'), CharClass::kSpace);
  EXPECT_EQ(char_class('\''), CharClass::kOther);
  EXPECT_EQ(char_class(0x1F), CharClass::kOther);
  EXPECT_EQ(char_class(0x00A0), CharClass::kSpace);
  EXPECT_EQ(char_class(0x0085), CharClass::kOther);  // not in JavaScript's \s
  EXPECT_EQ(char_class(0xFEFF), CharClass::kSpace);  // in JavaScript's \s
  EXPECT_EQ(char_class(0x00E9), CharClass::kLetter);
  EXPECT_EQ(char_class(0x4E2D), CharClass::kLetter);
  EXPECT_EQ(char_class(0x0661), CharClass::kNumber);
  EXPECT_EQ(char_class(0x2160), CharClass::kNumber);  // Roman numeral one (Nl)
  EXPECT_EQ(char_class(0x00BD), CharClass::kNumber);  // one half (No)
  EXPECT_EQ(char_class(0x0301), CharClass::kOther);   // combining acute (Mn)
  EXPECT_EQ(char_class(0x1F600), CharClass::kOther);
  EXPECT_EQ(char_class(0x1D518), CharClass::kLetter);  // mathematical fraktur U
  EXPECT_EQ(char_class(0x10FFFF), CharClass::kOther);
  EXPECT_EQ(char_class(0x110000), CharClass::kOther);
}

TEST(UnicodeClasses, TablesAreSortedDisjointRanges) {
  ASSERT_GT(kNumCodePointRanges, 0u);
  for (size_t i = 0; i < kNumCodePointRanges; ++i) {
    const CodePointRange& r = kCodePointRanges[i];
    EXPECT_LE(r.first, r.last);
    EXPECT_NE(r.char_class, CharClass::kOther);
    if (i > 0) {
      EXPECT_GT(r.first, kCodePointRanges[i - 1].last) << "range " << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bad vocabulary files

class TempFolder {
 public:
  TempFolder()
      : path_(std::filesystem::path(::testing::TempDir()) /
              ("gpt2_tokenizer_test_" + std::to_string(::getpid()) + "_" +
               std::to_string(counter_++))) {
    std::filesystem::create_directories(path_);
  }
  ~TempFolder() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& content) const {
    const std::string file = (path_ / name).string();
    std::ofstream(file, std::ios::binary) << content;
    return file;
  }

 private:
  static int counter_;
  std::filesystem::path path_;
};
int TempFolder::counter_ = 0;

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// The constructor's error message when it fails, or "" when it does not throw gpt2::Error.
std::string load_error(const std::string& encoder_json, const std::string& vocab_bpe) {
  try {
    Gpt2Tokenizer tokenizer(encoder_json, vocab_bpe);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Gpt2TokenizerFiles, MissingFileIsNamed) {
  const std::string missing = "/nonexistent/gpt2/encoder.json";
  std::string message = load_error(missing, kVocabBpe);
  EXPECT_NE(message.find(missing), std::string::npos) << message;
  const std::string missing_bpe = "/nonexistent/gpt2/vocab.bpe";
  message = load_error(kEncoderJson, missing_bpe);
  EXPECT_NE(message.find(missing_bpe), std::string::npos) << message;
}

TEST(Gpt2TokenizerFiles, CorruptEncoderJsonIsNamed) {
  TempFolder folder;
  const std::string json = read_whole(kEncoderJson);
  const std::vector<std::pair<std::string, std::string>> corruptions = {
      {"truncated", json.substr(0, json.size() / 2)},
      {"not an object", "[1, 2, 3]"},
      {"empty", ""},
      {"bad escape", "{\"\\q\": 0}"},
      {"lone surrogate", "{\"\\ud800\": 0}"},
      {"string value", "{\"a\": \"0\"}"},
      {"id out of range", "{\"a\": 5}"},
      {"trailing text", json + "x"},
      {"missing byte tokens", "{\"a\": 0, \"b\": 1}"},
  };
  for (const auto& [what, content] : corruptions) {
    const std::string path = folder.write("encoder.json", content);
    const std::string message = load_error(path, kVocabBpe);
    EXPECT_NE(message.find(path), std::string::npos) << what << ": " << message;
  }
}

TEST(Gpt2TokenizerFiles, CorruptVocabBpeIsNamed) {
  TempFolder folder;
  const std::vector<std::pair<std::string, std::string>> corruptions = {
      {"one field", "#version: 0.2\n\xc4\xa0t\nab\n"},
      {"three fields", "#version: 0.2\n\xc4\xa0 t x\n"},
      {"unknown symbol", "#version: 0.2\n\xc4\xa0 t\nzzzzzzzz qqqqqqqq\n"},
      {"no merges", "#version: 0.2\n"},
  };
  for (const auto& [what, content] : corruptions) {
    const std::string path = folder.write("vocab.bpe", content);
    const std::string message = load_error(kEncoderJson, path);
    EXPECT_NE(message.find(path), std::string::npos) << what << ": " << message;
  }
}

/// encoder.json text for a miniature vocabulary: the 256 byte tokens (ids = byte values,
/// keys written as \u escapes, or \" \\ \/ for those three) followed by extra_symbols
/// (ids 256...), spelled in GPT-2's byte alphabet. Exercises every JSON escape form.
std::string miniature_encoder_json(const std::vector<std::string>& extra_symbols) {
  uint32_t byte_to_cp[256];
  uint32_t extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    byte_to_cp[b] = printable ? b : extra++;
  }
  std::string json = "{\n";
  for (int b = 0; b < 256; ++b) {
    char escaped[16];
    std::snprintf(escaped, sizeof(escaped), "\\u%04X", byte_to_cp[b]);
    std::string key = escaped;
    if (b == '"') key = "\\\"";
    if (b == '\\') key = "\\\\";
    if (b == '/') key = "\\/";
    json += "  \"" + key + "\" : " + std::to_string(b) + ",\n";
  }
  for (size_t i = 0; i < extra_symbols.size(); ++i) {
    json += "\t\"" + extra_symbols[i] + "\":" + std::to_string(256 + i) + ",\r\n";
  }
  json.resize(json.rfind(','));  // no trailing comma
  return json + "\n}";
}

TEST(Gpt2TokenizerFiles, JsonEscapesDecode) {
  TempFolder folder;
  const std::string encoder_path =
      folder.write("encoder.json", miniature_encoder_json({"\\u0120t"}));
  const std::string bpe_path = folder.write("vocab.bpe", "#version: 0.2\n\xc4\xa0 t\n");
  Gpt2Tokenizer tokenizer(encoder_path, bpe_path);
  EXPECT_EQ(tokenizer.vocab_size(), 257);
  EXPECT_EQ(tokenizer.encode("a t"), (std::vector<int>{'a', 256}));  // "\u0120" is " "
  EXPECT_EQ(tokenizer.decode_token('"'), "\"");
  EXPECT_EQ(tokenizer.decode_token('/'), "/");
  EXPECT_EQ(tokenizer.decode_token('\\'), "\\");
  EXPECT_EQ(tokenizer.decode_token(' '), " ");
  // A surrogate pair spelling a 4-byte character decodes too (it fails only for not being in
  // the byte alphabet, which proves the pair was combined into one code point).
  const std::string pair_path = folder.write("pair.json", "{\"\\ud83d\\ude00\": 0}");
  const std::string message = load_error(pair_path, bpe_path);
  EXPECT_NE(message.find("\xf0\x9f\x98\x80"), std::string::npos) << message;
}

TEST(Gpt2TokenizerBpe, EachRankMergesAllItsOccurrencesBeforeAnyOtherMerge) {
  // Merges: 0 "ab a" -> "aba", 1 "a b" -> "ab", 2 "a a" -> "aa". BPE takes the lowest-ranked
  // pair present, merges every non-overlapping occurrence left to right, then looks again.
  // "abab": rank 1 makes [ab, ab]; "ab a" has the lower rank 0 but "ab"+"ab" is no merge, so
  // [ab, ab] it stays (merging "ab a" as soon as it forms would give [aba, b]).
  TempFolder folder;
  const std::string encoder_path =
      folder.write("encoder.json", miniature_encoder_json({"aba", "ab", "aa"}));
  const std::string bpe_path = folder.write("vocab.bpe", "#version: 0.2\nab a\na b\na a\n");
  Gpt2Tokenizer tokenizer(encoder_path, bpe_path);
  const int kAba = 256, kAb = 257, kAa = 258;
  EXPECT_EQ(tokenizer.encode("abab"), (std::vector<int>{kAb, kAb}));
  // "aba": [ab, a] after rank 1, then rank 0 joins them.
  EXPECT_EQ(tokenizer.encode("aba"), (std::vector<int>{kAba}));
  // Overlapping occurrences: "aaa" merges the first two only.
  EXPECT_EQ(tokenizer.encode("aaa"), (std::vector<int>{kAa, 'a'}));
  EXPECT_EQ(tokenizer.encode("aaaa"), (std::vector<int>{kAa, kAa}));
  // "abaab": rank 1 gives [ab, a, ab]; rank 0 then makes [aba, ab].
  EXPECT_EQ(tokenizer.encode("abaab"), (std::vector<int>{kAba, kAb}));
}

TEST(Gpt2TokenizerFiles, DefaultFilesLoad) {
  Gpt2Tokenizer tokenizer = Gpt2Tokenizer::from_default_files();
  EXPECT_EQ(tokenizer.encode("Hello world"), (std::vector<int>{15496, 995}));
}

}  // namespace
}  // namespace gpt2
