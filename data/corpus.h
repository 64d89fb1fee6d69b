/**
 * @file corpus.h
 * @brief A text corpus as a stream of documents: files and folders, .txt and .jsonl, plain or
 *        compressed (.gz, .zst), several documents per file.
 *
 * list_corpus_files() expands the inputs in the order given: a file is taken whatever its name
 * (an unknown extension reads as text); a folder is walked recursively and contributes its
 * files named *.txt, *.jsonl, *.txt.gz, *.jsonl.gz, *.txt.zst, *.jsonl.zst, sorted by byte
 * order of their paths (so the order, and everything made from it, is the same on every
 * machine); its other files are counted as ignored. A missing input throws naming it.
 * The format comes from the name without its .gz/.zst suffix: ".jsonl" is JSON Lines, anything
 * else text.
 *
 * DocumentReader streams one file's documents, holding one document (plus a read buffer):
 *   - JSON Lines: each line is one JSON object and one document, its string field
 *     options.jsonl_field; lines of only white space are skipped.
 *   - text, by options.separator: kWholeFile (the default: the file is one document, even an
 *     empty one), kLine (each line without its line end; empty lines skipped), kBlankLine (a
 *     run of lines that are not blank; its text runs from its first line to the end of its last
 *     line, that line's end ("\n" or "\r\n") excluded; a line of only spaces, tabs and "\r" is
 *     blank), kLiteral (the text between occurrences of options.separator.literal; pieces that
 *     are empty or only white space are skipped).
 * Document::line is the 1-based line where the document starts. A document that cannot be read
 * (invalid JSON, not an object, the field missing or not a string, more than
 * options.max_document_bytes) comes back with Document::problem set to "<path>:<line>: <what>",
 * and reading goes on with the next one: the caller refuses or skips it. A broken file
 * (truncated or corrupt compression, a read error) throws gpt2::Error "<path>:<line>: <what>",
 * the line being the one the data had reached; nothing after that point can be trusted.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/decompressing_reader.h"

namespace gpt2 {

enum class DocumentFormat { kText, kJsonLines };

struct CorpusFile {
  std::string path;
  DocumentFormat format = DocumentFormat::kText;
  Compression compression = Compression::kNone;
};

/// The format and compression a file's name says.
CorpusFile classify_corpus_file(const std::string& path);

/// True for the names a folder walk takes (*.txt, *.jsonl, each optionally .gz or .zst).
bool has_corpus_extension(const std::string& path);

/// Files and folders as described above; *ignored_files counts a folder's other files.
std::vector<CorpusFile> list_corpus_files(const std::vector<std::string>& inputs,
                                          int64_t* ignored_files);

struct DocumentSeparator {
  enum class Kind { kWholeFile, kLine, kBlankLine, kLiteral };
  Kind kind = Kind::kWholeFile;
  std::string literal;  // kLiteral only, never empty
};

/// "file", "line", "blank-line", else a literal string in which \n, \r, \t and \\ are escapes.
/// Throws gpt2::UsageError for an empty separator or a bad escape.
DocumentSeparator parse_document_separator(const std::string& text);

struct DocumentReaderOptions {
  std::string jsonl_field = "text";
  DocumentSeparator separator;
  size_t max_document_bytes = size_t{4} << 30;
};

struct Document {
  std::string text;
  int64_t line = 0;     // where it starts, 1-based
  std::string problem;  // non-empty: this document is bad, text is empty
};

class DocumentReader {
 public:
  DocumentReader(const CorpusFile& file, const DocumentReaderOptions& options);
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  /// The next document into *document; false after the last one.
  bool next(Document* document);

  /// Decompressed bytes taken from the file so far.
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  bool fill();  // appends the next piece of data to buffer_; false at the end of the data
  bool read_line(std::string* line, bool* too_long);
  bool next_whole_file(Document* document);
  /// The next line that is not blank into *line, its number in document->line; a line over
  /// the limit sets document->problem instead. false at the end of the file.
  bool next_content_line(std::string* line, Document* document);
  bool next_line_document(Document* document);
  bool next_blank_line_document(Document* document);
  bool next_literal_document(Document* document);
  bool next_json_document(Document* document);
  [[noreturn]] void fail_at_line(int64_t line, const std::string& what) const;

  CorpusFile file_;
  DocumentReaderOptions options_;
  std::unique_ptr<DecompressingReader> reader_;
  std::string buffer_;          // data read and not yet consumed starts at buffer_pos_
  size_t buffer_pos_ = 0;
  bool at_end_ = false;
  int64_t lines_consumed_ = 0;  // complete lines consumed so far (line-based formats)
  int64_t lines_fetched_ = 0;   // newlines in all data fetched (for error positions)
  uint64_t bytes_read_ = 0;
  bool whole_file_done_ = false;
};

}  // namespace gpt2
