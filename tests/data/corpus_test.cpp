/**
 * @file corpus_test.cpp
 * @brief data/corpus.h and data/decompressing_reader.h in process: the folder walk's order and
 *        filter, separators whose matches straddle read chunks, the document size limit, line
 *        numbers, several gzip members and zstd frames in one file, and truncation.
 */
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "compressed_fixtures.h"
#include "data/corpus.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;
using testing::gzip_bytes;
using testing::write_text_file;
using testing::zstd_bytes;

class CorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::path(::testing::TempDir()) /
              ("gpt2_corpus_test_" + std::to_string(::getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(folder_);
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }

  std::string path(const std::string& name) const { return (folder_ / name).string(); }

  /// Every document of one file: text, or "!" + problem for a bad one.
  static std::vector<std::string> read_all(const std::string& file,
                                           const DocumentReaderOptions& options) {
    DocumentReader reader(classify_corpus_file(file), options);
    std::vector<std::string> documents;
    Document document;
    while (reader.next(&document)) {
      documents.push_back(document.problem.empty() ? document.text : "!" + document.problem);
    }
    return documents;
  }

  fs::path folder_;
};

TEST_F(CorpusTest, FolderWalkSortsByPathAndTakesCorpusNamesOnly) {
  fs::create_directories(path("c/b"));
  for (const char* name : {"c/z.txt", "c/a.jsonl.zst", "c/b/m.txt.gz", "c/B.txt", "c/notes.md",
                           "c/data.json", "c/b/x.jsonl"}) {
    write_text_file(path(name), "");
  }
  write_text_file(path("single.md"), "");  // named on its own: taken, as text
  int64_t ignored = 0;
  const std::vector<CorpusFile> files =
      list_corpus_files({path("single.md"), path("c")}, &ignored);
  std::vector<std::string> names;
  for (const CorpusFile& file : files) names.push_back(fs::relative(file.path, folder_).string());
  EXPECT_EQ(names, (std::vector<std::string>{"single.md", "c/B.txt", "c/a.jsonl.zst",
                                             "c/b/m.txt.gz", "c/b/x.jsonl", "c/z.txt"}));
  EXPECT_EQ(ignored, 2);
  EXPECT_EQ(files[2].format, DocumentFormat::kJsonLines);
  EXPECT_EQ(files[2].compression, Compression::kZstd);
  EXPECT_EQ(files[3].format, DocumentFormat::kText);
  EXPECT_EQ(files[3].compression, Compression::kGzip);
  EXPECT_THROW(list_corpus_files({path("missing")}, &ignored), Error);
}

TEST_F(CorpusTest, LiteralSeparatorsAcrossReadChunksAndLineNumbers) {
  GPT2_REQUIRE_COMPRESSION();
  // Documents of 10,000 bytes between "<|sep|>": the 64 KiB reads cut separators in two.
  std::string text;
  std::vector<std::string> expected;
  for (int i = 0; i < 40; ++i) {
    std::string document(9990, static_cast<char>('a' + i % 26));
    document += "\nline two";
    expected.push_back(document);
    text += document + "<|sep|>";
  }
  write_text_file(path("big.txt.gz"), gzip_bytes(text));
  DocumentReaderOptions options;
  options.separator = parse_document_separator("<|sep|>");
  EXPECT_EQ(read_all(path("big.txt.gz"), options), expected);

  DocumentReader reader(classify_corpus_file(path("big.txt.gz")), options);
  Document document;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(reader.next(&document));
  EXPECT_EQ(document.line, 3);  // each document holds one newline
}

TEST_F(CorpusTest, DocumentsOverTheLimitAreNamedAndSkippedOver) {
  write_text_file(path("lines.txt"), "short\n" + std::string(50, 'x') + "\nafter\n");
  DocumentReaderOptions options;
  options.max_document_bytes = 20;
  options.separator = parse_document_separator("line");
  EXPECT_EQ(read_all(path("lines.txt"), options),
            (std::vector<std::string>{"short", "!" + path("lines.txt") +
                                      ":2: line longer than the 20-byte limit for one document",
                                      "after"}));
  options.separator = parse_document_separator("##");
  write_text_file(path("sep.txt"), "one##" + std::string(100000, 'y') + "##two");
  const std::vector<std::string> pieces = read_all(path("sep.txt"), options);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], "one");
  EXPECT_EQ(pieces[1].rfind("!" + path("sep.txt") + ":1: document larger than", 0), 0u)
      << pieces[1];
  EXPECT_EQ(pieces[2], "two");
}

TEST_F(CorpusTest, SeveralGzipMembersAndZstdFramesReadAsOne) {
  GPT2_REQUIRE_COMPRESSION();
  write_text_file(path("m.jsonl.gz"), gzip_bytes("{\"text\": \"one\"}\n") +
                                          gzip_bytes("{\"text\": \"two\"}\n"));
  write_text_file(path("m.jsonl.zst"), zstd_bytes("{\"text\": \"one\"}\n") +
                                           zstd_bytes("{\"text\": \"two\"}\n"));
  for (const char* name : {"m.jsonl.gz", "m.jsonl.zst"}) {
    EXPECT_EQ(read_all(path(name), DocumentReaderOptions{}),
              (std::vector<std::string>{"one", "two"}))
        << name;
  }
  // The second member or frame cut short is still truncation.
  const std::string whole_gz = gzip_bytes("a\n") + gzip_bytes("b\n");
  const std::string whole_zst = zstd_bytes("a\n") + zstd_bytes("b\n");
  write_text_file(path("cut.txt.gz"), whole_gz.substr(0, whole_gz.size() - 3));
  write_text_file(path("cut.txt.zst"), whole_zst.substr(0, whole_zst.size() - 3));
  for (const char* name : {"cut.txt.gz", "cut.txt.zst"}) {
    try {
      read_all(path(name), DocumentReaderOptions{});
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path(name) + ":"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    }
  }
}

TEST_F(CorpusTest, SeparatorEscapesAndKeywords) {
  EXPECT_EQ(parse_document_separator("file").kind, DocumentSeparator::Kind::kWholeFile);
  EXPECT_EQ(parse_document_separator("line").kind, DocumentSeparator::Kind::kLine);
  EXPECT_EQ(parse_document_separator("blank-line").kind, DocumentSeparator::Kind::kBlankLine);
  EXPECT_EQ(parse_document_separator("\\n---\\n").literal, "\n---\n");
  EXPECT_EQ(parse_document_separator("a\\\\b\\t").literal, "a\\b\t");
  EXPECT_THROW(parse_document_separator(""), UsageError);
  EXPECT_THROW(parse_document_separator("x\\"), UsageError);
}

}  // namespace
}  // namespace gpt2
