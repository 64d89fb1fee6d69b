/**
 * @file tokenize_corpus_test.cpp
 * @brief gpt2-tokenize on real corpora: folders of .txt/.jsonl/.gz/.zst files, several
 *        documents per file, llm.c shard sets, both validation splits, threads, bad input.
 *
 * Expected token streams come from the in-process tokenizer: [EOT] + encode(document) for each
 * document in the documented order (a folder's files sorted by path). Compressed inputs are
 * made here with zlib and zstd (compressed_fixtures.h). Every bad input must exit 1 naming
 * "file:line" and leave no shard, final or temporary, behind.
 */
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file_io.h"
#include "base/rng.h"
#include "compressed_fixtures.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "run_command.h"
#include "tokenizer_test_fixture.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;
using testing::gzip_bytes;
using testing::write_text_file;
using testing::zstd_bytes;

testing::CommandResult run_tool(const std::vector<std::string>& args) {
  return testing::run_binary(GPT2_TOKENIZE_BINARY, args);
}

std::string jsonl_line(const std::string& text) {
  return nlohmann::json({{"id", 7}, {"text", text}}).dump() + "\n";
}

class TokenizeCorpusTest : public testing::TokenizerFolderTest {
 protected:
  TokenizeCorpusTest() : TokenizerFolderTest("gpt2_tokenize_corpus") {}
  void SetUp() override {
    TokenizerFolderTest::SetUp();
    fs::create_directories(path("in"));
  }

  /// [EOT] + ids of each document, concatenated.
  static std::vector<uint16_t> expected_tokens(const std::vector<std::string>& documents) {
    std::vector<uint16_t> tokens;
    for (const std::string& document : documents) {
      tokens.push_back(Gpt2Tokenizer::kEndOfText);
      for (const int id : tokenizer_->encode(document)) tokens.push_back(static_cast<uint16_t>(id));
    }
    return tokens;
  }

  /// The names of the files in a folder, sorted ("" entries for none).
  static std::vector<std::string> file_names(const std::string& folder) {
    std::vector<std::string> names;
    if (!fs::exists(folder)) return names;
    for (const auto& entry : fs::directory_iterator(folder)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  /// All shards of a list, concatenated.
  std::vector<uint16_t> read_shards(const std::vector<std::string>& names) const {
    std::vector<uint16_t> tokens;
    for (const std::string& name : names) {
      const std::vector<uint16_t> shard = read_shard(path("out/" + name), tokenizer_->vocab_size());
      tokens.insert(tokens.end(), shard.begin(), shard.end());
    }
    return tokens;
  }

};

TEST_F(TokenizeCorpusTest, MixedFolderGivesTheTokensOfThePlainTexts) {
  GPT2_REQUIRE_COMPRESSION();
  // Files in the byte order of their paths, and the documents each holds.
  write_text_file(path("in/a.txt"), "A plain text file is one document.\n");
  write_text_file(path("in/b.jsonl"), jsonl_line("first JSON line") + "\n" +
                                          jsonl_line("caf\xc3\xa9 <|endoftext|> \xf0\x9f\x98\x80"));
  write_text_file(path("in/c.jsonl.gz"), gzip_bytes(jsonl_line("gzip one") + jsonl_line("")));
  write_text_file(path("in/d.jsonl.zst"),
                  zstd_bytes(jsonl_line("zstd one") + jsonl_line("zstd\ttwo\r\n")));
  write_text_file(path("in/e.txt.gz"), gzip_bytes("gzip text\n\nstill the same document"));
  write_text_file(path("in/f.txt.zst"), zstd_bytes("zstd text, one document"));
  fs::create_directories(path("in/sub"));
  write_text_file(path("in/sub/g.txt"), "in a sub-folder");
  write_text_file(path("in/README.md"), "not a corpus file: ignored");
  const std::vector<std::string> documents = {
      "A plain text file is one document.\n",
      "first JSON line",
      "caf\xc3\xa9 <|endoftext|> \xf0\x9f\x98\x80",
      "gzip one",
      "",
      "zstd one",
      "zstd\ttwo\r\n",
      "gzip text\n\nstill the same document",
      "zstd text, one document",
      "in a sub-folder"};

  const testing::CommandResult run =
      run_tool({"--input", path("in"), "--output-prefix", path("out/corpus")});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(file_names(path("out")), std::vector<std::string>{"corpus_train_000000.bin"});
  EXPECT_EQ(read_shards({"corpus_train_000000.bin"}), expected_tokens(documents));
  EXPECT_NE(run.output.find("10 documents from 7 files (1 other files ignored)"),
            std::string::npos)
      << run.output;

  // The same inputs named one by one give the same stream in the single-file mode.
  std::vector<std::string> args = {"--input"};
  for (const char* name : {"a.txt", "b.jsonl", "c.jsonl.gz", "d.jsonl.zst", "e.txt.gz",
                           "f.txt.zst", "sub/g.txt"}) {
    args.push_back(path(std::string("in/") + name));
  }
  args.insert(args.end(), {"--output", path("single.bin")});
  const testing::CommandResult single = run_tool(args);
  ASSERT_EQ(single.exit_code, 0) << single.output;
  EXPECT_EQ(read_shard(path("single.bin"), 0), expected_tokens(documents));
}

TEST_F(TokenizeCorpusTest, DocumentSeparatorsCutOneFileIntoDocuments) {
  const std::string text = "first paragraph\nsecond line\n\n\n  \nsecond paragraph\r\n\r\nthird";
  write_text_file(path("in/book.txt"), text);
  const struct {
    std::string separator;
    std::vector<std::string> documents;
  } cases[] = {
      {"file", {text}},
      {"blank-line", {"first paragraph\nsecond line", "second paragraph", "third"}},
      {"line", {"first paragraph", "second line", "second paragraph", "third"}},
      {"\\n\\n", {"first paragraph\nsecond line", "\n  \nsecond paragraph\r\n\r\nthird"}},
      {"para", {"first ", "graph\nsecond line\n\n\n  \nsecond ", "graph\r\n\r\nthird"}},
  };
  for (const auto& c : cases) {
    fs::remove_all(path("out.bin"));
    const testing::CommandResult run = run_tool(
        {"--input", path("in/book.txt"), "--output", path("out.bin"), "--doc-separator",
         c.separator});
    ASSERT_EQ(run.exit_code, 0) << c.separator << "\n" << run.output;
    EXPECT_EQ(decode_documents(read_shard(path("out.bin"), 0)), c.documents) << c.separator;
  }
}

TEST_F(TokenizeCorpusTest, ShardsHoldShardTokensEachValidationFirst) {
  std::vector<std::string> documents;
  std::string jsonl;
  for (int i = 0; i < 20; ++i) {
    documents.push_back("document number " + std::to_string(i) + " with some words in it");
    jsonl += jsonl_line(documents.back());
  }
  write_text_file(path("in/all.jsonl"), jsonl);
  constexpr size_t kShardTokens = 7;
  const testing::CommandResult run =
      run_tool({"--input", path("in/all.jsonl"), "--output-prefix", path("out/c"),
                "--shard-tokens", std::to_string(kShardTokens), "--val-fraction", "0.25"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::vector<std::string> val_documents, train_documents;
  for (int i = 0; i < 20; ++i) {
    (i % 4 == 3 ? val_documents : train_documents).push_back(documents[i]);
  }
  const std::vector<uint16_t> val = expected_tokens(val_documents);
  const std::vector<uint16_t> train = expected_tokens(train_documents);
  // Validation takes numbers 0.. and training goes on from there, as llm.c names them.
  const size_t val_shards = (val.size() + kShardTokens - 1) / kShardTokens;
  const size_t train_shards = (train.size() + kShardTokens - 1) / kShardTokens;
  std::vector<std::string> val_names, train_names;
  for (size_t i = 0; i < val_shards + train_shards; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "c_%s_%06zu.bin", i < val_shards ? "val" : "train", i);
    (i < val_shards ? val_names : train_names).push_back(name);
  }
  std::vector<std::string> all_names = train_names;
  all_names.insert(all_names.end(), val_names.begin(), val_names.end());
  std::sort(all_names.begin(), all_names.end());
  EXPECT_EQ(file_names(path("out")), all_names);
  EXPECT_EQ(read_shards(val_names), val);
  EXPECT_EQ(read_shards(train_names), train);
  // Every shard is full but the last of its split; documents run on across the boundaries.
  for (const std::vector<std::string>* names : {&val_names, &train_names}) {
    for (size_t i = 0; i < names->size(); ++i) {
      const int64_t count = read_shard_header(path("out/" + (*names)[i])).num_tokens;
      if (i + 1 < names->size()) {
        EXPECT_EQ(count, static_cast<int64_t>(kShardTokens)) << (*names)[i];
      } else {
        EXPECT_GE(count, 1) << (*names)[i];
        EXPECT_LE(count, static_cast<int64_t>(kShardTokens)) << (*names)[i];
      }
    }
  }
  EXPECT_NE(run.output.find("--train-data '" + path("out/c") + "_train_*.bin' --val-data '" +
                            path("out/c") + "_val_*.bin'"),
            std::string::npos)
      << run.output;
  // A second run over the same prefix would mix old and new shards: refused.
  const testing::CommandResult again =
      run_tool({"--input", path("in/all.jsonl"), "--output-prefix", path("out/c")});
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("would mix with the new shards"), std::string::npos) << again.output;
}

TEST_F(TokenizeCorpusTest, ValidationFractionCountsDocumentsOfOneBigFile) {
  GPT2_REQUIRE_COMPRESSION();
  std::vector<std::string> documents;
  std::string text;
  for (int i = 0; i < 10; ++i) {
    documents.push_back("paragraph " + std::to_string(i) + "\nits second line");
    text += documents.back() + "\n\n";
  }
  write_text_file(path("in/big.txt.zst"), zstd_bytes(text));
  const testing::CommandResult run =
      run_tool({"--input", path("in/big.txt.zst"), "--doc-separator", "blank-line", "--output",
                path("train.bin"), "--val-output", path("val.bin"), "--val-fraction", "0.3"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // floor(0.3 (i+1)) > floor(0.3 i) for i = 3, 6, 9.
  EXPECT_EQ(decode_documents(read_shard(path("val.bin"), 0)),
            (std::vector<std::string>{documents[3], documents[6], documents[9]}));
  EXPECT_EQ(decode_documents(read_shard(path("train.bin"), 0)),
            (std::vector<std::string>{documents[0], documents[1], documents[2], documents[4],
                                      documents[5], documents[7], documents[8]}));
}

TEST_F(TokenizeCorpusTest, ValidationTokensFractionTakesWholeDocumentsClosestToTheTarget) {
  // Ten documents of one word each: 2 tokens with the end-of-text token. At F = 0.25, document
  // i is validation when 2*val + 1 <= 0.25 * 2 * (i + 1) before it: i = 1, 5 and 9 (worked by
  // hand), 6 of 20 tokens.
  const std::vector<std::string> words = {"the", "and", "of", "to", "in",
                                          "is",  "that", "it", "was", "for"};
  std::string text;
  for (const std::string& word : words) {
    ASSERT_EQ(tokenizer_->encode(word).size(), 1u) << word;
    text += word + "\n";
  }
  write_text_file(path("in/words.txt"), text);
  const testing::CommandResult run = run_tool(
      {"--input", path("in/words.txt"), "--doc-separator", "line", "--output-prefix",
       path("out/w"), "--val-tokens-fraction", "0.25"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(decode_documents(read_shards({"w_val_000000.bin"})),
            (std::vector<std::string>{"and", "is", "for"}));
  EXPECT_EQ(decode_documents(read_shards({"w_train_000001.bin"})),
            (std::vector<std::string>{"the", "of", "to", "in", "that", "it", "was"}));

  // Documents of different sizes: validation stays within half a document of F of the tokens.
  std::string jsonl;
  Rng rng(5);
  for (int i = 0; i < 300; ++i) {
    std::string document;
    const int words_in_document = 1 + static_cast<int>(rng.uniform_int(40));
    for (int w = 0; w < words_in_document; ++w) document += words[rng.uniform_int(10)] + " ";
    jsonl += jsonl_line(document);
  }
  write_text_file(path("in/varied.jsonl"), jsonl);
  const testing::CommandResult varied = run_tool(
      {"--input", path("in/varied.jsonl"), "--output", path("t.bin"), "--val-output",
       path("v.bin"), "--val-tokens-fraction", "0.1"});
  ASSERT_EQ(varied.exit_code, 0) << varied.output;
  const double val = static_cast<double>(read_shard_header(path("v.bin")).num_tokens);
  const double all = val + static_cast<double>(read_shard_header(path("t.bin")).num_tokens);
  EXPECT_NEAR(val, 0.1 * all, 21.0) << val << " of " << all;  // the longest document: 41 tokens
}

TEST_F(TokenizeCorpusTest, AnEmptySplitIsRefusedWithNothingWritten) {
  write_text_file(path("in/three.txt"), "one\ntwo\nthree\n");
  for (const char* option : {"--val-fraction", "--val-tokens-fraction"}) {
    const testing::CommandResult run =
        run_tool({"--input", path("in/three.txt"), "--doc-separator", "line", "--output-prefix",
                  path("out/x"), "--shard-tokens", "1", option, "0.1"});
    EXPECT_EQ(run.exit_code, 2) << option << "\n" << run.output;
    EXPECT_NE(run.output.find("leaves the validation split empty"), std::string::npos)
        << run.output;
    EXPECT_EQ(file_names(path("out")), std::vector<std::string>{}) << option;
  }
}

TEST_F(TokenizeCorpusTest, ThreadsGiveTheSameShards) {
  GPT2_REQUIRE_COMPRESSION();
  Rng rng(17);
  for (int f = 0; f < 4; ++f) {
    std::string jsonl;
    for (int d = 0; d < 150; ++d) {
      std::string document;
      const int length = 1 + static_cast<int>(rng.uniform_int(400));
      for (int c = 0; c < length; ++c) {
        document += static_cast<char>(rng.uniform_int(8) == 0 ? ' ' : 'a' + rng.uniform_int(26));
      }
      jsonl += jsonl_line(document);
    }
    write_text_file(path("in/part" + std::to_string(f) + ".jsonl.gz"), gzip_bytes(jsonl));
  }
  std::vector<std::vector<char>> outputs;
  for (const char* threads : {"1", "3", "8"}) {
    const std::string prefix = path(std::string("out/t") + threads);
    const testing::CommandResult run =
        run_tool({"--input", path("in"), "--output-prefix", prefix, "--shard-tokens", "5000",
                  "--val-tokens-fraction", "0.05", "--threads", threads});
    ASSERT_EQ(run.exit_code, 0) << threads << "\n" << run.output;
    std::vector<char> all;
    int shards = 0;
    for (const std::string& name : file_names(path("out"))) {
      if (name.rfind(std::string("t") + threads + "_", 0) != 0) continue;
      const std::vector<char> bytes = read_file_bytes(path("out/" + name));
      all.insert(all.end(), bytes.begin(), bytes.end());
      ++shards;
    }
    EXPECT_GT(shards, 3) << threads;
    outputs.push_back(all);
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_EQ(outputs[0], outputs[2]);
}

TEST_F(TokenizeCorpusTest, BadInputExitsOneNamingFileAndLineAndWritesNothing) {
  GPT2_REQUIRE_COMPRESSION();
  // A good file first. (Temporary shards written before a failure are removed with the rest:
  // AnEmptySplitIsRefusedWithNothingWritten fails after all of them are written.)
  write_text_file(path("in/a_good.jsonl"), jsonl_line("a good document before the bad one"));
  std::string long_text;
  for (int i = 0; i < 5000; ++i) long_text += "line " + std::to_string(i) + "\n";
  const std::string gz = gzip_bytes(long_text);
  const std::string zst = zstd_bytes(long_text);
  std::string corrupt_zst = zst, corrupt_gz = gz;
  for (size_t i = zst.size() / 2; i < zst.size() / 2 + 16; ++i) corrupt_zst[i] ^= 0x5a;
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 16; ++i) corrupt_gz[i] ^= 0x5a;
  const struct {
    std::string name;
    std::string bytes;
    std::string message;  // after "<path>:"
  } cases[] = {
      {"b.jsonl", jsonl_line("ok") + "\n" + "{\"text\": \"unterminated\n", "3: invalid JSON: "},
      {"b.jsonl", jsonl_line("ok") + "[\"an array\"]\n", "2: a JSON array where each line must"},
      {"b.jsonl", jsonl_line("ok") + jsonl_line("ok") + "{\"body\": \"x\"}\n",
       "3: no field \"text\""},
      {"b.jsonl", "{\"text\": 42}\n", "1: field \"text\" is a JSON number, not a string"},
      {"b.jsonl.gz", gzip_bytes(jsonl_line("ok") + "{oops}\n"), "2: invalid JSON: "},
      {"b.txt.gz", gz.substr(0, gz.size() / 2), ""},
      {"b.txt.gz", gz.substr(0, gz.size() - 4), "5001: truncated gzip data"},
      {"b.txt.zst", zst.substr(0, zst.size() / 2), ""},
      {"b.txt.zst", corrupt_zst, ""},
      {"b.txt.gz", corrupt_gz, ""},
      {"b.txt.gz", "", "1: truncated gzip data"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name + " " + c.message);
    const std::string bad = path("in/" + c.name);
    write_text_file(bad, c.bytes);
    for (const std::vector<std::string>& output :
         {std::vector<std::string>{"--output-prefix", path("out/x"), "--shard-tokens", "1000"},
          std::vector<std::string>{"--output", path("out/x.bin")}}) {
      std::vector<std::string> args = {"--input", path("in/a_good.jsonl"), bad,
                                       "--doc-separator", "line"};
      args.insert(args.end(), output.begin(), output.end());
      const testing::CommandResult run = run_tool(args);
      EXPECT_EQ(run.exit_code, 1) << run.output;
      const std::string named = "gpt2-tokenize: error: " + bad + ":";
      EXPECT_EQ(run.output.find(named + c.message), 0u) << run.output;
      const bool compressed = c.name.find(".txt.") != std::string::npos;
      if (compressed) {
        EXPECT_TRUE(run.output.find("truncated") != std::string::npos ||
                    run.output.find("corrupt") != std::string::npos)
            << run.output;
      }
      EXPECT_EQ(file_names(path("out")), std::vector<std::string>{}) << run.output;
    }
    fs::remove(bad);
  }
}

TEST_F(TokenizeCorpusTest, SkipBadDocumentsCountsAndNamesThem) {
  GPT2_REQUIRE_COMPRESSION();
  write_text_file(path("in/mixed.jsonl"), jsonl_line("kept one") + "not json\n" +
                                              "{\"text\": null}\n" + jsonl_line("kept two") +
                                              "{\"other\": \"x\"}\n");
  const testing::CommandResult run =
      run_tool({"--input", path("in/mixed.jsonl"), "--output", path("o.bin"),
                "--skip-bad-documents"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(decode_documents(read_shard(path("o.bin"), 0)),
            (std::vector<std::string>{"kept one", "kept two"}));
  EXPECT_NE(run.output.find("skipped 3 bad documents"), std::string::npos) << run.output;
  for (const char* line : {":2: invalid JSON", ":3: field \"text\" is a JSON null",
                           ":5: no field \"text\""}) {
    EXPECT_NE(run.output.find("skipped " + path("in/mixed.jsonl") + line), std::string::npos)
        << line << "\n" << run.output;
  }
  // Broken compression is not a document problem: it still stops the run.
  write_text_file(path("in/broken.jsonl.gz"), gzip_bytes(jsonl_line("x")).substr(0, 12));
  const testing::CommandResult broken =
      run_tool({"--input", path("in"), "--output", path("p.bin"), "--skip-bad-documents"});
  EXPECT_EQ(broken.exit_code, 1) << broken.output;
  EXPECT_NE(broken.output.find("truncated gzip data"), std::string::npos) << broken.output;
  EXPECT_FALSE(fs::exists(path("p.bin")));
}

TEST_F(TokenizeCorpusTest, JsonlFieldChoosesTheTextField) {
  write_text_file(path("in/c.jsonl"), "{\"content\": \"from content\", \"text\": 1}\n");
  const testing::CommandResult run = run_tool(
      {"--input", path("in/c.jsonl"), "--output", path("o.bin"), "--jsonl-field", "content"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(decode_documents(read_shard(path("o.bin"), 0)),
            std::vector<std::string>{"from content"});
}

TEST_F(TokenizeCorpusTest, BadCorpusCommandLinesExitTwo) {
  write_text_file(path("in/a.txt"), "text");
  const std::string in = path("in/a.txt");
  const std::string prefix = path("out/p");
  const std::vector<std::vector<std::string>> bad = {
      {"--input", in, "--output", path("o.bin"), "--output-prefix", prefix},
      {"--input", in, "--output-prefix", prefix, "--val-fraction", "0.1",
       "--val-tokens-fraction", "0.1"},
      {"--input", in, "--output-prefix", prefix, "--shard-tokens", "0"},
      {"--input", in, "--output-prefix", prefix, "--shard-tokens", "3000000000"},
      {"--input", in, "--output-prefix", prefix, "--shard-tokens", "1e6"},
      {"--input", in, "--output", path("o.bin"), "--shard-tokens", "100"},
      {"--input", in, "--output-prefix", prefix, "--val-output", path("v.bin")},
      {"--input", in, "--output-prefix", path("out/")},
      {"--input", in, "--output-prefix", prefix, "--threads", "0"},
      {"--input", in, "--output-prefix", prefix, "--doc-separator", ""},
      {"--input", in, "--output-prefix", prefix, "--doc-separator", "a\\qb"},
      {"--input", in, "--output-prefix", prefix, "--jsonl-field", ""},
      {"--input", in, "--output", path("o.bin"), "--val-output", path("v.bin"),
       "--val-tokens-fraction", "1"},
  };
  for (const std::vector<std::string>& args : bad) {
    std::string joined;
    for (const std::string& arg : args) joined += arg + " ";
    const testing::CommandResult run = run_tool(args);
    EXPECT_EQ(run.exit_code, 2) << joined << "\n" << run.output;
    EXPECT_EQ(run.output.rfind("gpt2-tokenize: error: ", 0), 0u) << joined << "\n" << run.output;
    EXPECT_FALSE(fs::exists(path("out"))) << joined;
    EXPECT_FALSE(fs::exists(path("o.bin"))) << joined;
  }
  // A folder without corpus files is bad input, not a bad command line.
  fs::create_directories(path("empty"));
  write_text_file(path("empty/notes.md"), "not a corpus file");
  const testing::CommandResult empty =
      run_tool({"--input", path("empty"), "--output-prefix", prefix});
  EXPECT_EQ(empty.exit_code, 1) << empty.output;
  EXPECT_NE(empty.output.find("no input files"), std::string::npos) << empty.output;
}

}  // namespace
}  // namespace gpt2
