/**
 * @file corpus.cpp
 * @brief Corpus files to documents: the folder walk, the separators, JSON Lines (corpus.h).
 *
 * All formats read through one buffer of decompressed data (buffer_, consumed up to
 * buffer_pos_, compacted when more than half of it is consumed), so a file is streamed and
 * only the current document is held. Lines are counted twice: lines_consumed_ for where a
 * document starts, lines_fetched_ (every newline decompressed so far) for where broken data was
 * met. A document over the size limit is read through to its end without being kept, so the
 * reader stays in step with the file and the problem names its first line.
 */
#include "data/corpus.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace gpt2 {

namespace fs = std::filesystem;

namespace {

constexpr size_t kReadChunkBytes = size_t{1} << 16;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string without_compression_suffix(const std::string& path) {
  for (const char* suffix : {".gz", ".zst"}) {
    if (ends_with(path, suffix)) return path.substr(0, path.size() - std::string(suffix).size());
  }
  return path;
}

bool is_white_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

bool is_blank(const char* begin, const char* end) {
  return std::all_of(begin, end, is_white_space);
}

bool is_blank(const std::string& text) { return is_blank(text.data(), text.data() + text.size()); }

int64_t count_newlines(const char* begin, const char* end) {
  return std::count(begin, end, '\n');
}

void strip_carriage_return(std::string* line) {
  if (!line->empty() && line->back() == '\r') line->pop_back();
}

/// nlohmann's message without its "[json.exception.parse_error.101] " tag.
std::string json_error_text(const std::exception& e) {
  const std::string what = e.what();
  const size_t tag_end = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && tag_end != std::string::npos
             ? what.substr(tag_end + 2)
             : what;
}

}  // namespace

CorpusFile classify_corpus_file(const std::string& path) {
  CorpusFile file;
  file.path = path;
  file.compression = compression_of(path);
  file.format = ends_with(without_compression_suffix(path), ".jsonl") ? DocumentFormat::kJsonLines
                                                                      : DocumentFormat::kText;
  return file;
}

bool has_corpus_extension(const std::string& path) {
  const std::string name = without_compression_suffix(path);
  return ends_with(name, ".txt") || ends_with(name, ".jsonl");
}

std::vector<CorpusFile> list_corpus_files(const std::vector<std::string>& inputs,
                                          int64_t* ignored_files) {
  *ignored_files = 0;
  std::vector<CorpusFile> files;
  for (const std::string& input : inputs) {
    std::error_code error;
    const fs::file_status status = fs::status(input, error);
    if (!fs::exists(status)) GPT2_FAIL(input, ": no such file or folder");
    if (!fs::is_directory(status)) {
      files.push_back(classify_corpus_file(input));
      continue;
    }
    std::vector<std::string> found;
    fs::recursive_directory_iterator walk(input, error);
    for (; !error && walk != fs::recursive_directory_iterator(); walk.increment(error)) {
      if (!walk->is_regular_file(error)) continue;
      const std::string path = walk->path().string();
      if (has_corpus_extension(path)) {
        found.push_back(path);
      } else {
        ++*ignored_files;
      }
    }
    if (error) GPT2_FAIL(input, ": cannot list the folder: ", error.message());
    std::sort(found.begin(), found.end());  // byte order, whatever the locale
    for (const std::string& path : found) files.push_back(classify_corpus_file(path));
  }
  return files;
}

DocumentSeparator parse_document_separator(const std::string& text) {
  DocumentSeparator separator;
  if (text == "file") return separator;
  if (text == "line") {
    separator.kind = DocumentSeparator::Kind::kLine;
    return separator;
  }
  if (text == "blank-line") {
    separator.kind = DocumentSeparator::Kind::kBlankLine;
    return separator;
  }
  separator.kind = DocumentSeparator::Kind::kLiteral;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      separator.literal += text[i];
      continue;
    }
    const char escaped = i + 1 < text.size() ? text[++i] : '\0';
    switch (escaped) {
      case 'n': separator.literal += '\n'; break;
      case 'r': separator.literal += '\r'; break;
      case 't': separator.literal += '\t'; break;
      case '\\': separator.literal += '\\'; break;
      default:
        GPT2_USAGE_FAIL("--doc-separator '", text, "': unknown escape (\\n, \\r, \\t and \\\\ "
                        "are the escapes; a lone backslash is written \\\\)");
    }
  }
  if (separator.literal.empty()) {
    GPT2_USAGE_FAIL("--doc-separator is empty: give file, line, blank-line or a string");
  }
  return separator;
}

// ---------------------------------------------------------------------------------------------
// DocumentReader

DocumentReader::DocumentReader(const CorpusFile& file, const DocumentReaderOptions& options)
    : file_(file), options_(options), reader_(std::make_unique<DecompressingReader>(file.path)) {}

DocumentReader::~DocumentReader() = default;

void DocumentReader::fail_at_line(int64_t line, const std::string& what) const {
  GPT2_FAIL(file_.path, ":", line, ": ", what);
}

bool DocumentReader::fill() {
  if (at_end_) return false;
  char chunk[kReadChunkBytes];
  size_t got = 0;
  try {
    got = reader_->read(chunk, sizeof chunk);
  } catch (const Error& e) {
    fail_at_line(lines_fetched_ + 1, e.what());
  }
  if (got == 0) {
    at_end_ = true;
    return false;
  }
  if (buffer_pos_ > 0 && buffer_pos_ >= buffer_.size() / 2) {
    buffer_.erase(0, buffer_pos_);
    buffer_pos_ = 0;
  }
  buffer_.append(chunk, got);
  bytes_read_ += got;
  lines_fetched_ += count_newlines(chunk, chunk + got);
  return true;
}

bool DocumentReader::read_line(std::string* line, bool* too_long) {
  line->clear();
  *too_long = false;
  bool got_any = false;
  for (;;) {
    const size_t newline = buffer_.find('\n', buffer_pos_);
    const size_t end = newline == std::string::npos ? buffer_.size() : newline;
    const size_t take = end - buffer_pos_;
    got_any = got_any || take > 0 || newline != std::string::npos;
    if (!*too_long && line->size() + take > options_.max_document_bytes) {
      *too_long = true;
      line->clear();
    }
    if (!*too_long) line->append(buffer_, buffer_pos_, take);
    buffer_pos_ = end;
    if (newline != std::string::npos) {
      buffer_pos_ = newline + 1;
      ++lines_consumed_;
      return true;
    }
    if (!fill()) {
      if (got_any) ++lines_consumed_;
      return got_any;
    }
  }
}

bool DocumentReader::next(Document* document) {
  document->text.clear();
  document->problem.clear();
  document->line = lines_consumed_ + 1;
  if (file_.format == DocumentFormat::kJsonLines) return next_json_document(document);
  switch (options_.separator.kind) {
    case DocumentSeparator::Kind::kWholeFile: return next_whole_file(document);
    case DocumentSeparator::Kind::kLine: return next_line_document(document);
    case DocumentSeparator::Kind::kBlankLine: return next_blank_line_document(document);
    case DocumentSeparator::Kind::kLiteral: return next_literal_document(document);
  }
  return false;
}

bool DocumentReader::next_whole_file(Document* document) {
  if (whole_file_done_) return false;
  whole_file_done_ = true;
  document->line = 1;
  bool too_large = false;
  while (fill()) {
    if (buffer_.size() - buffer_pos_ > options_.max_document_bytes) {
      too_large = true;
      buffer_.clear();
      buffer_pos_ = 0;
    }
  }
  if (too_large) {
    document->problem = str_cat(file_.path, ":1: the file is one document (--doc-separator file) "
                                "and it is larger than the ", options_.max_document_bytes,
                                "-byte limit for one document");
    return true;
  }
  document->text = buffer_.substr(buffer_pos_);
  buffer_.clear();
  buffer_pos_ = 0;
  return true;
}

bool DocumentReader::next_content_line(std::string* line, Document* document) {
  bool too_long = false;
  for (;;) {
    const int64_t line_number = lines_consumed_ + 1;
    if (!read_line(line, &too_long)) return false;
    if (!too_long && is_blank(*line)) continue;
    document->line = line_number;
    if (too_long) {
      document->problem = str_cat(file_.path, ":", line_number, ": line longer than the ",
                                  options_.max_document_bytes, "-byte limit for one document");
    }
    return true;
  }
}

bool DocumentReader::next_line_document(Document* document) {
  std::string line;
  if (!next_content_line(&line, document)) return false;
  if (document->problem.empty()) {
    strip_carriage_return(&line);
    document->text = std::move(line);
  }
  return true;
}

bool DocumentReader::next_blank_line_document(Document* document) {
  std::string line;
  bool too_long = false;
  bool in_document = false;
  bool document_too_long = false;
  for (;;) {
    const int64_t line_number = lines_consumed_ + 1;
    if (!read_line(&line, &too_long)) break;
    if (!too_long && is_blank(line)) {
      if (in_document) break;
      continue;
    }
    if (!in_document) {
      in_document = true;
      document->line = line_number;
    }
    const size_t added = line.size() + (document->text.empty() ? 0 : 1);
    if (too_long || document->text.size() + added > options_.max_document_bytes) {
      document_too_long = true;
      document->text.clear();
    }
    if (document_too_long) continue;
    if (!document->text.empty()) document->text += '\n';
    document->text += line;
  }
  if (!in_document) return false;
  if (document_too_long) {
    document->problem = str_cat(file_.path, ":", document->line, ": document larger than the ",
                                options_.max_document_bytes, "-byte limit for one document");
    return true;
  }
  strip_carriage_return(&document->text);
  return true;
}

bool DocumentReader::next_literal_document(Document* document) {
  const std::string& separator = options_.separator.literal;
  size_t search_offset = 0;  // from buffer_pos_: no separator starts before it
  bool too_long = false;
  for (;;) {
    const size_t found = buffer_.find(separator, buffer_pos_ + search_offset);
    if (found == std::string::npos && !at_end_) {
      const size_t pending = buffer_.size() - buffer_pos_;
      if (pending > options_.max_document_bytes + separator.size()) {
        // Too long: drop all but the bytes a separator could still start in.
        if (!too_long) document->line = lines_consumed_ + 1;
        too_long = true;
        const size_t drop = pending - (separator.size() - 1);
        lines_consumed_ += count_newlines(&buffer_[buffer_pos_], &buffer_[buffer_pos_] + drop);
        buffer_pos_ += drop;
      }
      search_offset = buffer_.size() - buffer_pos_ >= separator.size()
                          ? buffer_.size() - buffer_pos_ - (separator.size() - 1)
                          : 0;
      fill();
      continue;
    }
    const size_t end = found == std::string::npos ? buffer_.size() : found;
    const size_t next = found == std::string::npos ? end : found + separator.size();
    const char* begin = buffer_.data() + buffer_pos_;
    const int64_t start_line = lines_consumed_ + 1;
    const bool blank = is_blank(begin, buffer_.data() + end);
    const bool piece_too_long = too_long || end - buffer_pos_ > options_.max_document_bytes;
    if (!piece_too_long && !blank) document->text.assign(begin, end - buffer_pos_);
    lines_consumed_ += count_newlines(begin, buffer_.data() + next);
    buffer_pos_ = next;
    search_offset = 0;
    if (piece_too_long) {
      if (!too_long) document->line = start_line;
      document->problem = str_cat(file_.path, ":", document->line, ": document larger than the ",
                                  options_.max_document_bytes, "-byte limit for one document");
      return true;
    }
    if (!blank) {
      document->line = start_line;
      return true;
    }
    if (found == std::string::npos) return false;
  }
}

bool DocumentReader::next_json_document(Document* document) {
  std::string line;
  if (!next_content_line(&line, document)) return false;
  if (!document->problem.empty()) return true;
  const std::string where = str_cat(file_.path, ":", document->line, ": ");
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    document->problem = str_cat(where, "invalid JSON: ", json_error_text(e));
    return true;
  }
  const std::string& field = options_.jsonl_field;
  if (!value.is_object()) {
    document->problem = str_cat(where, "a JSON ", value.type_name(), " where each line must be "
                                "a JSON object (with a string field \"", field, "\")");
    return true;
  }
  const auto found = value.find(field);
  if (found == value.end()) {
    document->problem = str_cat(where, "no field \"", field, "\" (choose the field with "
                                "--jsonl-field)");
    return true;
  }
  if (!found->is_string()) {
    document->problem = str_cat(where, "field \"", field, "\" is a JSON ", found->type_name(),
                                ", not a string");
    return true;
  }
  document->text = std::move(found->get_ref<std::string&>());
  return true;
}

}  // namespace gpt2
