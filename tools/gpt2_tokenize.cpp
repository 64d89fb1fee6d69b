// gpt2-tokenize: turns text files into llm.c token shards with the GPT-2 tokenizer.
//
//   gpt2-tokenize --input FILE... --output OUT.bin [--val-output VAL.bin --val-fraction F]
//
// Each input file is one document; every document is preceded by the end-of-text token
// 50256, as llm.c's data scripts do. With --val-fraction F, whole documents go to the
// validation shard, spread evenly and deterministically: document i (0-based, in input order)
// is validation when floor((i+1)*F) > floor(i*F), which puts floor(N*F) of N documents there.
// All inputs are read and tokenized before anything is written, and shards are written
// atomically (data/shard.h), so a failure leaves no output behind.
// An output that is the same file as an input or as the other output (same device and inode,
// or the same path once normalized and its links followed) is refused before anything is read.
// Outputs are written as base/file_io.h says: a regular file (or a new one) atomically, a
// symbolic link through to its target, a character device or FIFO streamed; a socket or block
// device is refused (exit 2). A document larger than 4 GiB is refused (exit 1).
// Exit codes: 0 success, 1 bad input file or other error, 2 bad command line.
// The tokenizer files come from data_dir()/tokenizer (data/paths.h; $GPT2_DATA_DIR overrides).
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// File names may contain commas: never split a --input value.
#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>

#include "base/command_line.h"
#include "base/error.h"
#include "base/file_io.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace gpt2 {
namespace {

// One document's text is held whole, and the tokenizer's working memory is about eight times the
// longest piece of it: a larger document is refused rather than allowed to exhaust memory.
constexpr size_t kMaxDocumentBytes = size_t{4} << 30;

struct TokenizeOptions {
  std::vector<std::string> inputs;
  std::string output;
  std::string val_output;   // empty: no validation split
  double val_fraction = 0;  // in (0, 1) when val_output is set
};

cxxopts::Options make_options() {
  cxxopts::Options options(
      "gpt2-tokenize",
      "Tokenize text files (one document each) into GPT-2 token shards in llm.c's format.");
  options.custom_help("--input FILE... --output OUT.bin [--val-output VAL.bin --val-fraction F]");
  options.positional_help("");
  options.show_positional_help();
  options.add_options()
      ("input", "input text files, one document each",
       cxxopts::value<std::vector<std::string>>())
      ("output", "training shard to write", cxxopts::value<std::string>())
      ("val-output", "validation shard to write (needs --val-fraction)",
       cxxopts::value<std::string>())
      ("val-fraction", "fraction of documents for validation, in (0, 1)",
       cxxopts::value<std::string>())
      ("h,help", "print this help");
  // Files after the first --input value are positional arguments: all of them are inputs.
  options.parse_positional({"input"});
  return options;
}

/// Document i of a split with validation fraction f goes to validation.
bool is_val_document(int64_t i, double val_fraction) {
  return std::floor(static_cast<double>(i + 1) * val_fraction) >
         std::floor(static_cast<double>(i) * val_fraction);
}

TokenizeOptions parse_command_line(int argc, char** argv, bool* help) {
  cxxopts::Options options = make_options();
  const cxxopts::ParseResult result = parse_tool_options(options, argc, argv);
  *help = result.count("help") > 0;
  TokenizeOptions opts;
  if (*help) return opts;

  if (result.count("input") == 0) GPT2_USAGE_FAIL("--input is required (see --help)");
  opts.inputs = result["input"].as<std::vector<std::string>>();
  for (const std::string& input : opts.inputs) {
    if (input.empty()) GPT2_USAGE_FAIL("--input: empty file name");
  }
  if (result.count("output") == 0) GPT2_USAGE_FAIL("--output is required (see --help)");
  opts.output = result["output"].as<std::string>();
  if (opts.output.empty()) GPT2_USAGE_FAIL("--output is empty");

  const bool has_val_output = result.count("val-output") > 0;
  if (has_val_output) opts.val_output = result["val-output"].as<std::string>();
  // An output written over an input would destroy it, and two outputs of one file would leave
  // only the second: compared as files (a link or another spelling is the same file).
  std::vector<CommandPath> paths = {{"--output", opts.output, true},
                                    {"--val-output", opts.val_output, true}};
  for (const std::string& input : opts.inputs) paths.push_back({"--input", input, false});
  refuse_shared_outputs(paths);
  check_output_path("--output", opts.output);
  if (has_val_output) check_output_path("--val-output", opts.val_output);
  const bool has_val_fraction = result.count("val-fraction") > 0;
  if (has_val_output != has_val_fraction) {
    GPT2_USAGE_FAIL("--val-output and --val-fraction must be given together");
  }
  if (has_val_output) {
    if (opts.val_output.empty()) GPT2_USAGE_FAIL("--val-output is empty");
    const std::string text = result["val-fraction"].as<std::string>();
    errno = 0;
    char* end = nullptr;
    opts.val_fraction = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE ||
        !(opts.val_fraction > 0.0 && opts.val_fraction < 1.0)) {
      GPT2_USAGE_FAIL("--val-fraction must be a number strictly between 0 and 1 (got '", text,
                      "')");
    }
    const int64_t num_docs = static_cast<int64_t>(opts.inputs.size());
    int64_t num_val = 0;
    for (int64_t i = 0; i < num_docs; ++i) num_val += is_val_document(i, opts.val_fraction);
    if (num_val == 0 || num_val == num_docs) {
      GPT2_USAGE_FAIL("--val-fraction ", text, " of ", num_docs, " document(s) leaves the ",
                      num_val == 0 ? "validation" : "training",
                      " split empty: give more input files or a ",
                      num_val == 0 ? "larger" : "smaller", " fraction");
    }
  }
  return opts;
}

void append_document(Gpt2Tokenizer& tokenizer, const std::string& text,
                     std::vector<uint16_t>& tokens) {
  tokens.push_back(static_cast<uint16_t>(Gpt2Tokenizer::kEndOfText));
  for (const int id : tokenizer.encode(text)) {
    GPT2_CHECK(id >= 0 && id <= UINT16_MAX, "token id ", id, " does not fit a uint16 shard");
    tokens.push_back(static_cast<uint16_t>(id));
  }
}

void run(const TokenizeOptions& opts) {
  Gpt2Tokenizer tokenizer = Gpt2Tokenizer::from_default_files();
  std::vector<uint16_t> train_tokens;
  std::vector<uint16_t> val_tokens;
  int64_t train_docs = 0;
  int64_t val_docs = 0;
  for (size_t i = 0; i < opts.inputs.size(); ++i) {
    // Names a missing file, and one beyond the limit.
    const std::string text = read_file_text(opts.inputs[i], kMaxDocumentBytes);
    const bool to_val = !opts.val_output.empty() &&
                        is_val_document(static_cast<int64_t>(i), opts.val_fraction);
    append_document(tokenizer, text, to_val ? val_tokens : train_tokens);
    (to_val ? val_docs : train_docs) += 1;
  }
  write_shard(opts.output, train_tokens);
  std::printf("gpt2-tokenize: %zu documents; train: %lld documents, %zu tokens -> %s\n",
              opts.inputs.size(), static_cast<long long>(train_docs), train_tokens.size(),
              opts.output.c_str());
  if (!opts.val_output.empty()) {
    write_shard(opts.val_output, val_tokens);
    std::printf("gpt2-tokenize: val: %lld documents, %zu tokens -> %s\n",
                static_cast<long long>(val_docs), val_tokens.size(), opts.val_output.c_str());
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
