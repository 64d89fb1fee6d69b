// gpt2-tokenize: turns a text corpus into llm.c token shards with the GPT-2 tokenizer.
//
//   gpt2-tokenize --input PATH... --output-prefix PREFIX [--val-fraction F] [--shard-tokens N]
//   gpt2-tokenize --input PATH... --output OUT.bin [--val-output VAL.bin --val-fraction F]
//
// Inputs are files and folders (data/corpus.h: folders recursively, in byte order of the paths;
// .txt and .jsonl, each also .gz or .zst). A text file is one document unless --doc-separator
// says how to cut it (line, blank-line or a literal string); a JSON Lines file holds one
// document per line, in the string field --jsonl-field (default "text"). Every document is
// preceded by the end-of-text token 50256, as llm.c's data scripts do.
// Validation split, by whole documents in input order, deterministic and evenly spread:
//   --val-fraction F: document i (0-based, over all inputs) is validation when
//     floor((i+1)*F) > floor(i*F), which puts floor(N*F) of N documents there;
//   --val-tokens-fraction F: a document is validation when that brings the validation token
//     count closer to F times the tokens so far (this document's included; ties go to
//     validation), so validation holds about F of the tokens, off by at most half a document.
// A split that leaves either side empty is refused (exit 2) and nothing is written.
// Outputs: --output-prefix writes llm.c's layout: PREFIX_val_000000.bin ... then
// PREFIX_train_NNNNNN.bin numbered on from the last validation shard (from 000000 without a
// split), each --shard-tokens tokens (default 100M) but the last of its split; documents run on
// across shard boundaries, as in llm.c's fineweb.py. gpt2-train reads them with
// --train-data 'PREFIX_train_*.bin' --val-data 'PREFIX_val_*.bin'. Existing shards of that
// prefix are refused (exit 2): they would mix with the new ones. --output (and --val-output)
// write one shard each, held in memory, as before.
// All or nothing, with bounded memory: documents are streamed and tokenized in batches
// (--threads workers, one tokenizer each; ids are the same for any count). In prefix mode each
// full shard is written at once to a temporary "PREFIX.partial.<pid>.<split>.<k>" and all are
// renamed to their final names only after the last input was read without error and the split
// was checked; a failure removes them. So on failure no output file exists (exit 1; or 2 as
// above), and a kill leaves only *.partial.* files. Single shards are written atomically
// (data/shard.h), validation first.
// Bad input: a document that cannot be read (invalid JSON, not an object, field missing or not
// a string, over 4 GiB) stops the run naming "file:line" unless --skip-bad-documents, which
// skips it, names the first ten on stderr and counts them. Broken compression (truncated,
// corrupt) always stops the run, naming file and line: what follows cannot be trusted.
// Progress ("documents, tokens, MB/s" of text) is a line on stderr, redrawn twice a second,
// only when stderr is a terminal and --quiet is not given; the summary goes to stdout.
// An output that is the same file as an input or as the other output is refused (exit 2), as
// are sockets and block devices (base/file_io.h); a symbolic link is written through, a
// character device or FIFO streamed.
// Exit codes: 0 success, 1 bad input or other error, 2 bad command line.
// The tokenizer files come from data_dir()/tokenizer (data/paths.h; $GPT2_DATA_DIR overrides).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// File names may contain commas: never split a --input value.
#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>

#include "base/command_line.h"
#include "base/error.h"
#include "base/file_io.h"
#include "data/corpus.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;

// One document's text is held whole, and the tokenizer's working memory is about eight times the
// longest piece of it: a larger document is refused rather than allowed to exhaust memory.
constexpr size_t kMaxDocumentBytes = size_t{4} << 30;
constexpr int64_t kDefaultShardTokens = 100'000'000;
// Text gathered before a batch is tokenized, per worker thread.
constexpr size_t kBatchBytesPerThread = size_t{8} << 20;
constexpr int kMaxThreads = 1024;
constexpr int64_t kMaxNamedBadDocuments = 10;

enum class SplitBy { kNone, kDocuments, kTokens };
enum class Split { kVal = 0, kTrain = 1 };

struct TokenizeOptions {
  std::vector<std::string> inputs;
  std::string output;         // single-shard mode
  std::string val_output;     // single-shard mode; empty: no validation shard
  std::string output_prefix;  // sharded mode
  int64_t shard_tokens = kDefaultShardTokens;
  SplitBy split_by = SplitBy::kNone;
  double val_fraction = 0;       // in (0, 1) when split_by != kNone
  std::string val_option;        // "--val-fraction 0.05", for messages
  DocumentReaderOptions reader;
  int threads = 1;
  bool skip_bad_documents = false;
  bool quiet = false;
};

cxxopts::Options make_options() {
  cxxopts::Options options(
      "gpt2-tokenize",
      "Tokenize text corpora (files and folders; .txt, .jsonl, also .gz and .zst) into GPT-2\n"
      "token shards in llm.c's format.");
  options.custom_help(
      "--input PATH... (--output-prefix PREFIX | --output OUT.bin [--val-output VAL.bin]) "
      "[--val-fraction F | --val-tokens-fraction F] [options]");
  options.positional_help("");
  options.show_positional_help();
  options.add_options()
      ("input", "input files and folders (folders: *.txt, *.jsonl, also .gz/.zst, recursively)",
       cxxopts::value<std::vector<std::string>>())
      ("output-prefix", "write shards PREFIX_val_000000.bin, PREFIX_train_000001.bin, ...",
       cxxopts::value<std::string>())
      ("shard-tokens", "tokens per shard with --output-prefix (default 100000000)",
       cxxopts::value<std::string>())
      ("output", "training shard to write (one file, built in memory)",
       cxxopts::value<std::string>())
      ("val-output", "validation shard to write with --output (needs a fraction)",
       cxxopts::value<std::string>())
      ("val-fraction", "fraction of documents for validation, in (0, 1)",
       cxxopts::value<std::string>())
      ("val-tokens-fraction", "fraction of tokens for validation (whole documents), in (0, 1)",
       cxxopts::value<std::string>())
      ("doc-separator", "how a text file splits into documents: file (default), line, "
       "blank-line, or a literal string (escapes \\n \\r \\t \\\\)", cxxopts::value<std::string>())
      ("jsonl-field", "the string field of each .jsonl line holding the text (default text)",
       cxxopts::value<std::string>())
      ("threads", "tokenizer threads (default 1; output is the same for any count)",
       cxxopts::value<std::string>())
      ("skip-bad-documents", "skip unreadable documents (bad JSON, missing field), counting them")
      ("quiet", "no progress line on stderr")
      ("h,help", "print this help");
  // Paths after the first --input value are positional arguments: all of them are inputs.
  options.parse_positional({"input"});
  return options;
}

/// Document i of a split with validation fraction f goes to validation.
bool is_val_document(int64_t i, double val_fraction) {
  return std::floor(static_cast<double>(i + 1) * val_fraction) >
         std::floor(static_cast<double>(i) * val_fraction);
}

double parse_fraction(const std::string& option, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE ||
      !(value > 0.0 && value < 1.0)) {
    GPT2_USAGE_FAIL(option, " must be a number strictly between 0 and 1 (got '", text, "')");
  }
  return value;
}

int64_t parse_count(const std::string& option, const std::string& text, int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || value < 1 ||
      value > max) {
    GPT2_USAGE_FAIL(option, " must be a whole number from 1 to ", max, " (got '", text, "')");
  }
  return value;
}

/// PREFIX_train_*.bin and PREFIX_val_*.bin already there: the first one found, else "".
std::string existing_shard_of_prefix(const std::string& prefix) {
  const fs::path prefix_path(prefix);
  const fs::path folder = prefix_path.has_parent_path() ? prefix_path.parent_path() : ".";
  const std::string stem = prefix_path.filename().string();
  std::error_code error;
  if (!fs::is_directory(folder, error)) return "";
  std::vector<std::string> found;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    const bool is_bin = name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0;
    if (is_bin && (name.rfind(stem + "_train_", 0) == 0 || name.rfind(stem + "_val_", 0) == 0)) {
      found.push_back(entry.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? "" : found.front();
}

TokenizeOptions parse_command_line(int argc, char** argv, bool* help) {
  cxxopts::Options options = make_options();
  const cxxopts::ParseResult result = parse_tool_options(options, argc, argv);
  *help = result.count("help") > 0;
  TokenizeOptions opts;
  if (*help) return opts;
  const auto given = [&](const char* name) { return result.count(name) > 0; };
  const auto text = [&](const char* name) { return result[name].as<std::string>(); };

  if (!given("input")) GPT2_USAGE_FAIL("--input is required (see --help)");
  opts.inputs = result["input"].as<std::vector<std::string>>();
  for (const std::string& input : opts.inputs) {
    if (input.empty()) GPT2_USAGE_FAIL("--input: empty file name");
  }
  if (given("output") == given("output-prefix")) {
    GPT2_USAGE_FAIL(given("output") ? "--output and --output-prefix exclude each other"
                                    : "--output-prefix (or --output) is required (see --help)");
  }
  if (given("val-fraction") && given("val-tokens-fraction")) {
    GPT2_USAGE_FAIL("--val-fraction (by documents) and --val-tokens-fraction (by tokens) "
                    "exclude each other");
  }
  for (const char* fraction_option : {"val-fraction", "val-tokens-fraction"}) {
    if (!given(fraction_option)) continue;
    const std::string option = std::string("--") + fraction_option;
    opts.val_fraction = parse_fraction(option, text(fraction_option));
    opts.split_by = given("val-fraction") ? SplitBy::kDocuments : SplitBy::kTokens;
    opts.val_option = option + " " + text(fraction_option);
  }

  if (given("output")) {
    opts.output = text("output");
    if (opts.output.empty()) GPT2_USAGE_FAIL("--output is empty");
    if (given("shard-tokens")) GPT2_USAGE_FAIL("--shard-tokens goes with --output-prefix");
    const bool has_val_output = given("val-output");
    if (has_val_output) opts.val_output = text("val-output");
    // An output written over an input would destroy it, and two outputs of one file would
    // leave only the second: compared as files (a link or another spelling is the same file).
    std::vector<CommandPath> paths = {{"--output", opts.output, true},
                                      {"--val-output", opts.val_output, true}};
    for (const std::string& input : opts.inputs) paths.push_back({"--input", input, false});
    refuse_shared_outputs(paths);
    check_output_path("--output", opts.output);
    if (has_val_output) check_output_path("--val-output", opts.val_output);
    if (has_val_output != (opts.split_by != SplitBy::kNone)) {
      GPT2_USAGE_FAIL("--val-output and --val-fraction (or --val-tokens-fraction) must be given "
                      "together");
    }
    if (has_val_output && opts.val_output.empty()) GPT2_USAGE_FAIL("--val-output is empty");
  } else {
    opts.output_prefix = text("output-prefix");
    if (opts.output_prefix.empty() || opts.output_prefix.back() == '/') {
      GPT2_USAGE_FAIL("--output-prefix '", opts.output_prefix, "' needs a file name part: "
                      "shards are PREFIX_train_000001.bin");
    }
    if (given("val-output")) {
      GPT2_USAGE_FAIL("--val-output goes with --output; --output-prefix writes PREFIX_val_* "
                      "shards itself");
    }
    if (given("shard-tokens")) {
      opts.shard_tokens = parse_count("--shard-tokens", text("shard-tokens"),
                                      std::numeric_limits<int32_t>::max());
    }
    const std::string existing = existing_shard_of_prefix(opts.output_prefix);
    if (!existing.empty()) {
      GPT2_USAGE_FAIL("--output-prefix ", opts.output_prefix, ": ", existing,
                      " exists and would mix with the new shards: remove the old ones or choose "
                      "another prefix");
    }
  }
  if (given("doc-separator")) {
    opts.reader.separator = parse_document_separator(text("doc-separator"));
  }
  if (given("jsonl-field")) {
    opts.reader.jsonl_field = text("jsonl-field");
    if (opts.reader.jsonl_field.empty()) GPT2_USAGE_FAIL("--jsonl-field is empty");
  }
  opts.reader.max_document_bytes = kMaxDocumentBytes;
  if (given("threads")) {
    opts.threads = static_cast<int>(parse_count("--threads", text("threads"), kMaxThreads));
  }
  opts.skip_bad_documents = given("skip-bad-documents");
  opts.quiet = given("quiet");
  return opts;
}

// ---------------------------------------------------------------------------------------------
// Splitting and tokenizing

/// Decides, document by document in input order, which split each one goes to.
class ValidationSplit {
 public:
  ValidationSplit(SplitBy by, double fraction) : by_(by), fraction_(fraction) {}

  Split place(int64_t document_tokens) {
    const int64_t index = documents_++;
    bool to_val = false;
    if (by_ == SplitBy::kDocuments) {
      to_val = is_val_document(index, fraction_);
    } else if (by_ == SplitBy::kTokens) {
      // Closer to the target with it than without: |v + n - target| <= |v - target|.
      const double target = fraction_ * static_cast<double>(all_tokens_ + document_tokens);
      to_val = static_cast<double>(val_tokens_) + 0.5 * static_cast<double>(document_tokens) <=
               target;
    }
    all_tokens_ += document_tokens;
    if (to_val) val_tokens_ += document_tokens;
    return to_val ? Split::kVal : Split::kTrain;
  }

 private:
  SplitBy by_;
  double fraction_;
  int64_t documents_ = 0;
  int64_t all_tokens_ = 0;
  int64_t val_tokens_ = 0;
};

void encode_document(Gpt2Tokenizer& tokenizer, const std::string& text,
                     std::vector<uint16_t>* tokens) {
  tokens->clear();
  tokens->push_back(static_cast<uint16_t>(Gpt2Tokenizer::kEndOfText));
  for (const int id : tokenizer.encode(text)) {
    GPT2_CHECK(id >= 0 && id <= UINT16_MAX, "token id ", id, " does not fit a uint16 shard");
    tokens->push_back(static_cast<uint16_t>(id));
  }
}

/// Tokenizes texts[i] into tokens[i] with one tokenizer per thread; documents are handed out
/// one at a time, and each one's ids depend on its text alone, so any thread count gives the
/// same result.
void tokenize_batch(const std::vector<std::string>& texts, std::vector<Gpt2Tokenizer>& tokenizers,
                    std::vector<std::vector<uint16_t>>* tokens) {
  tokens->resize(texts.size());
  const size_t workers = std::min(tokenizers.size(), texts.size());
  if (workers <= 1) {
    for (size_t i = 0; i < texts.size(); ++i) {
      encode_document(tokenizers[0], texts[i], &(*tokens)[i]);
    }
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(workers);
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        for (size_t i; (i = next.fetch_add(1)) < texts.size();) {
          encode_document(tokenizers[w], texts[i], &(*tokens)[i]);
        }
      } catch (...) {
        errors[w] = std::current_exception();
        next.store(texts.size());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

// ---------------------------------------------------------------------------------------------
// Outputs

/// Where the tokens of the two splits go; nothing is final before commit().
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  virtual void append(Split split, const std::vector<uint16_t>& tokens) = 0;
  /// Makes the outputs final and returns what was written, one line per split.
  virtual std::string commit() = 0;
};

/// --output / --val-output: one shard each, held in memory, written atomically at the end.
class SingleShardSink : public TokenSink {
 public:
  SingleShardSink(const std::string& train_path, const std::string& val_path)
      : train_path_(train_path), val_path_(val_path) {}

  void append(Split split, const std::vector<uint16_t>& tokens) override {
    std::vector<uint16_t>& out = split == Split::kVal ? val_ : train_;
    out.insert(out.end(), tokens.begin(), tokens.end());
  }

  std::string commit() override {
    std::string written;
    if (!val_path_.empty()) {
      write_shard(val_path_, val_);
      written += str_cat("val: ", val_.size(), " tokens -> ", val_path_, "\n");
    }
    write_shard(train_path_, train_);
    return str_cat("train: ", train_.size(), " tokens -> ", train_path_, "\n") + written;
  }

 private:
  std::string train_path_;
  std::string val_path_;
  std::vector<uint16_t> train_;
  std::vector<uint16_t> val_;
};

/// --output-prefix: shards of shard_tokens tokens, each written to a temporary name as it
/// fills; commit() renames them all to llm.c's names (validation first), a failure or a
/// destruction before that removes them.
class ShardSetSink : public TokenSink {
 public:
  ShardSetSink(const std::string& prefix, int64_t shard_tokens)
      : prefix_(prefix), shard_tokens_(static_cast<size_t>(shard_tokens)) {}

  ~ShardSetSink() override {
    for (const auto& split_parts : parts_) {
      for (const std::string& part : split_parts) ::unlink(part.c_str());
    }
  }

  void append(Split split, const std::vector<uint16_t>& tokens) override {
    std::vector<uint16_t>& pending = pending_[index(split)];
    for (size_t begin = 0; begin < tokens.size();) {
      const size_t take = std::min(shard_tokens_ - pending.size(), tokens.size() - begin);
      pending.insert(pending.end(), tokens.begin() + begin, tokens.begin() + begin + take);
      begin += take;
      if (pending.size() == shard_tokens_) write_part(split);
    }
  }

  std::string commit() override {
    for (const Split split : {Split::kVal, Split::kTrain}) {
      if (!pending_[index(split)].empty()) write_part(split);
    }
    // Validation shards take the first numbers, as in llm.c (fineweb_val_000000.bin).
    std::vector<std::pair<std::string, std::string>> renames;
    int shard_number = 0;
    for (const Split split : {Split::kVal, Split::kTrain}) {
      for (const std::string& part : parts_[index(split)]) {
        char number[16];
        std::snprintf(number, sizeof number, "%06d", shard_number++);
        renames.emplace_back(part, str_cat(prefix_, split == Split::kVal ? "_val_" : "_train_",
                                           number, ".bin"));
      }
    }
    std::vector<std::string> placed;
    for (const auto& [part, final_name] : renames) {
      if (std::rename(part.c_str(), final_name.c_str()) != 0) {
        const int err = errno;
        for (const std::string& done : placed) ::unlink(done.c_str());
        GPT2_FAIL(final_name, ": cannot rename '", part, "' onto it: ", std::strerror(err));
      }
      placed.push_back(final_name);
    }
    parts_[0].clear();
    parts_[1].clear();
    std::string written;
    size_t first = 0;
    for (const Split split : {Split::kVal, Split::kTrain}) {
      const size_t count = part_counts_[index(split)];
      const char* name = split == Split::kVal ? "val" : "train";
      if (count == 0) continue;
      written += str_cat(name, ": ", tokens_[index(split)], " tokens in ", count,
                         count == 1 ? " shard: " : " shards: ", renames[first].second,
                         count == 1 ? "" : " ... " + renames[first + count - 1].second, "\n");
      first += count;
    }
    return written;
  }

 private:
  static size_t index(Split split) { return static_cast<size_t>(split); }

  void write_part(Split split) {
    const size_t i = index(split);
    if (parts_[0].empty() && parts_[1].empty()) {
      const fs::path folder = fs::path(prefix_).parent_path();
      if (!folder.empty()) make_directories(folder.string());
    }
    const std::string part = str_cat(prefix_, ".partial.", static_cast<long>(::getpid()), ".",
                                     split == Split::kVal ? "val" : "train", ".",
                                     part_counts_[i]);
    parts_[i].push_back(part);  // listed first: removed on failure whatever happens below
    write_shard(part, pending_[i]);
    tokens_[i] += static_cast<int64_t>(pending_[i].size());
    ++part_counts_[i];
    pending_[i].clear();
  }

  std::string prefix_;
  size_t shard_tokens_;
  std::vector<uint16_t> pending_[2];
  std::vector<std::string> parts_[2];  // temporary shards written, in order
  size_t part_counts_[2] = {0, 0};
  int64_t tokens_[2] = {0, 0};
};

// ---------------------------------------------------------------------------------------------
// Progress

/// "gpt2-tokenize: N documents, M tokens, X MB/s" redrawn on stderr at most twice a second,
/// when stderr is a terminal and --quiet is not given.
class ProgressLine {
 public:
  explicit ProgressLine(bool wanted) : enabled_(wanted && ::isatty(STDERR_FILENO) == 1) {}

  void update(int64_t documents, int64_t tokens, uint64_t text_bytes) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_ < std::chrono::milliseconds(500)) return;
    last_ = now;
    drawn_ = true;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\rgpt2-tokenize: %lld documents, %lld tokens, %.1f MB/s   ",
                 static_cast<long long>(documents), static_cast<long long>(tokens),
                 seconds > 0 ? static_cast<double>(text_bytes) / 1e6 / seconds : 0.0);
    std::fflush(stderr);
  }

  /// Ends the line, so that other messages start on their own.
  void break_line() {
    if (!drawn_) return;
    std::fputc('\n', stderr);
    drawn_ = false;
  }

 private:
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;
};

// ---------------------------------------------------------------------------------------------

void run(const TokenizeOptions& opts) {
  int64_t ignored_files = 0;
  const std::vector<CorpusFile> files = list_corpus_files(opts.inputs, &ignored_files);
  if (files.empty()) {
    GPT2_FAIL("no input files: the folders given hold no *.txt or *.jsonl files (also .gz, .zst)",
              ignored_files > 0 ? str_cat("; ", ignored_files, " other files ignored") : "");
  }
  std::vector<Gpt2Tokenizer> tokenizers(static_cast<size_t>(opts.threads),
                                        Gpt2Tokenizer::from_default_files());
  std::unique_ptr<TokenSink> sink;
  if (opts.output_prefix.empty()) {
    sink = std::make_unique<SingleShardSink>(opts.output, opts.val_output);
  } else {
    sink = std::make_unique<ShardSetSink>(opts.output_prefix, opts.shard_tokens);
  }
  ValidationSplit split(opts.split_by, opts.val_fraction);
  ProgressLine progress(!opts.quiet);

  int64_t documents[2] = {0, 0};
  int64_t tokens[2] = {0, 0};
  int64_t bad_documents = 0;
  uint64_t text_bytes = 0;  // of the files read to their end
  uint64_t current_file_bytes = 0;
  std::vector<std::string> batch;
  size_t batch_bytes = 0;
  std::vector<std::vector<uint16_t>> batch_tokens;
  const auto flush_batch = [&] {
    tokenize_batch(batch, tokenizers, &batch_tokens);
    for (const std::vector<uint16_t>& document_tokens : batch_tokens) {
      const Split to = split.place(static_cast<int64_t>(document_tokens.size()));
      sink->append(to, document_tokens);
      documents[static_cast<int>(to)] += 1;
      tokens[static_cast<int>(to)] += static_cast<int64_t>(document_tokens.size());
    }
    batch.clear();
    batch_bytes = 0;
    progress.update(documents[0] + documents[1], tokens[0] + tokens[1],
                    text_bytes + current_file_bytes);
  };
  const size_t batch_limit = kBatchBytesPerThread * static_cast<size_t>(opts.threads);
  for (const CorpusFile& file : files) {
    DocumentReader reader(file, opts.reader);
    Document document;
    while (reader.next(&document)) {
      if (!document.problem.empty()) {
        if (!opts.skip_bad_documents) {
          GPT2_FAIL(document.problem, " (--skip-bad-documents skips such documents; nothing was "
                    "written)");
        }
        if (++bad_documents <= kMaxNamedBadDocuments) {
          progress.break_line();
          std::fprintf(stderr, "gpt2-tokenize: skipped %s\n", document.problem.c_str());
        }
        continue;
      }
      batch_bytes += document.text.size();
      batch.push_back(std::move(document.text));
      if (batch_bytes >= batch_limit) {
        current_file_bytes = reader.bytes_read();
        flush_batch();
      }
    }
    text_bytes += reader.bytes_read();
    current_file_bytes = 0;
  }
  flush_batch();
  progress.break_line();

  const int64_t all_documents = documents[0] + documents[1];
  if (all_documents == 0) GPT2_FAIL("no documents in the inputs: nothing to write");
  const int kVal = static_cast<int>(Split::kVal);
  const int kTrain = static_cast<int>(Split::kTrain);
  if (opts.split_by != SplitBy::kNone && (documents[kVal] == 0 || documents[kTrain] == 0)) {
    const bool val_empty = documents[kVal] == 0;
    GPT2_USAGE_FAIL(opts.val_option, " of ", all_documents, " document(s) leaves the ",
                    val_empty ? "validation" : "training", " split empty: give more documents "
                    "or a ", val_empty ? "larger" : "smaller", " fraction; nothing was written");
  }
  const std::string written = sink->commit();
  std::printf("gpt2-tokenize: %lld documents from %zu files", static_cast<long long>(all_documents),
              files.size());
  if (ignored_files > 0) {
    std::printf(" (%lld other files ignored)", static_cast<long long>(ignored_files));
  }
  if (bad_documents > 0) {
    std::printf("; skipped %lld bad documents (the first %lld named on stderr)",
                static_cast<long long>(bad_documents),
                static_cast<long long>(std::min(bad_documents, kMaxNamedBadDocuments)));
  }
  std::printf("; train: %lld documents, %lld tokens",
              static_cast<long long>(documents[kTrain]), static_cast<long long>(tokens[kTrain]));
  if (opts.split_by != SplitBy::kNone) {
    std::printf("; val: %lld documents, %lld tokens", static_cast<long long>(documents[kVal]),
                static_cast<long long>(tokens[kVal]));
  }
  std::printf("\n");
  std::istringstream lines(written);
  for (std::string line; std::getline(lines, line);) {
    std::printf("gpt2-tokenize: %s\n", line.c_str());
  }
  if (!opts.output_prefix.empty()) {
    std::printf("gpt2-tokenize: train with --train-data '%s_train_*.bin'%s\n",
                opts.output_prefix.c_str(),
                opts.split_by == SplitBy::kNone
                    ? ""
                    : str_cat(" --val-data '", opts.output_prefix, "_val_*.bin'").c_str());
  }
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  return gpt2::run_tool_main("gpt2-tokenize", [&] {
    bool help = false;
    const gpt2::TokenizeOptions opts = gpt2::parse_command_line(argc, argv, &help);
    if (help) {
      std::printf("%s", gpt2::make_options().help().c_str());
      return 0;
    }
    gpt2::run(opts);
    return 0;
  });
}
