/**
 * @file tokenize_tool_test.cpp
 * @brief gpt2-tokenize end to end: runs the binary (GPT2_TOKENIZE_BINARY) on temporary files.
 *
 * Checks that the shards decode back to the inputs with an end-of-text token before each
 * document, that the validation split follows floor((i+1)*F) > floor(i*F) (expected
 * documents worked out by hand), that bad command lines exit 2 (an output that would overwrite
 * an input among them) and that a missing input exits non-zero naming the file and writes
 * nothing.
 */
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "base/rng.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "run_command.h"
#include "special_files.h"
#include "tokenizer_test_fixture.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;

using RunResult = testing::CommandResult;

/// Runs gpt2-tokenize with the given arguments (stdout and stderr together).
RunResult run_tool(const std::vector<std::string>& args) {
  return testing::run_binary(GPT2_TOKENIZE_BINARY, args);
}

class TokenizeToolTest : public testing::TokenizerFolderTest {
 protected:
  TokenizeToolTest() : TokenizerFolderTest("gpt2_tokenize_tool") {}

  /// Writes documents as doc_0.txt, doc_1.txt, ... and returns their paths in order.
  std::vector<std::string> write_documents(const std::vector<std::string>& documents) const {
    std::vector<std::string> paths;
    for (size_t i = 0; i < documents.size(); ++i) {
      paths.push_back(path("doc_" + std::to_string(i) + ".txt"));
      std::ofstream(paths.back(), std::ios::binary) << documents[i];
    }
    return paths;
  }

  /// The documents of a shard (whose first token must be end-of-text).
  static std::vector<std::string> decode_shard(const std::string& shard_path) {
    const std::vector<uint16_t> tokens = read_shard(shard_path, tokenizer_->vocab_size());
    EXPECT_FALSE(tokens.empty());
    EXPECT_EQ(tokens.empty() ? -1 : tokens[0], Gpt2Tokenizer::kEndOfText);
    return decode_documents(tokens);
  }

};

/// Ten small documents, each distinct, with white space, Unicode and "<|endoftext|>" text
/// (which must stay text, not become the separator).
std::vector<std::string> ten_documents() {
  std::vector<std::string> docs = {
      "In the beginning God created the heaven and the earth.\n",
      "Genesis 2\nThus the heavens and the earth were finished.",
      "  leading spaces and trailing ones  ",
      "caf\xc3\xa9, na\xc3\xafve, \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82, "
      "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80",
      "the literal <|endoftext|> is plain text",
      "",
      "numbers 1234567 and punctuation!?...",
      "tabs\tand\r\nwindows\r\nlines",
      "it's we'll they'd I'M",
      "the tenth and last document\n\n"};
  return docs;
}

TEST_F(TokenizeToolTest, ShardDecodesToInputsWithEndOfTextBeforeEach) {
  const std::vector<std::string> docs = ten_documents();
  std::vector<std::string> args = {"--input"};
  for (const std::string& p : write_documents(docs)) args.push_back(p);
  args.insert(args.end(), {"--output", path("train.bin")});
  const RunResult run = run_tool(args);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(decode_shard(path("train.bin")), docs);

  // The exact token stream: [EOT] + encode(doc) per document, in input order.
  std::vector<uint16_t> expected;
  for (const std::string& doc : docs) {
    expected.push_back(Gpt2Tokenizer::kEndOfText);
    for (const int id : tokenizer_->encode(doc)) expected.push_back(static_cast<uint16_t>(id));
  }
  EXPECT_EQ(read_shard(path("train.bin"), tokenizer_->vocab_size()), expected);
  EXPECT_NE(run.output.find("10 documents"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(std::to_string(expected.size()) + " tokens"), std::string::npos)
      << run.output;
}

TEST_F(TokenizeToolTest, RepeatedInputOptionsKeepOrder) {
  const std::vector<std::string> docs = {"first", "second", "third"};
  const std::vector<std::string> paths = write_documents(docs);
  const RunResult run = run_tool({"--input", paths[0], "--input", paths[1], paths[2],
                                  "--output", path("train.bin")});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(decode_shard(path("train.bin")), docs);
}

TEST_F(TokenizeToolTest, ValidationSplitTakesEvenlySpreadWholeDocuments) {
  const std::vector<std::string> docs = ten_documents();
  const std::vector<std::string> paths = write_documents(docs);
  // F = 0.25 over 10 documents: floor((i+1)/4) > floor(i/4) exactly for i = 3 and i = 7.
  // F = 0.5: every odd i. F = 0.3: floor(0.3(i+1)) steps up at i = 3, 6, 9.
  const std::vector<std::pair<std::string, std::vector<int>>> splits = {
      {"0.25", {3, 7}}, {"0.5", {1, 3, 5, 7, 9}}, {"0.3", {3, 6, 9}}};
  for (const auto& [fraction, val_indices] : splits) {
    std::vector<std::string> args = {"--input"};
    args.insert(args.end(), paths.begin(), paths.end());
    args.insert(args.end(), {"--output", path("train.bin"), "--val-output", path("val.bin"),
                             "--val-fraction", fraction});
    const RunResult run = run_tool(args);
    ASSERT_EQ(run.exit_code, 0) << fraction << ": " << run.output;
    std::vector<std::string> expected_train, expected_val;
    for (int i = 0; i < static_cast<int>(docs.size()); ++i) {
      const bool is_val =
          std::find(val_indices.begin(), val_indices.end(), i) != val_indices.end();
      (is_val ? expected_val : expected_train).push_back(docs[i]);
    }
    EXPECT_EQ(decode_shard(path("train.bin")), expected_train) << fraction;
    EXPECT_EQ(decode_shard(path("val.bin")), expected_val) << fraction;
  }
}

TEST_F(TokenizeToolTest, BadCommandLinesExitTwo) {
  const std::vector<std::string> paths = write_documents({"one", "two", "three"});
  const std::string out = path("train.bin");
  const std::string val = path("val.bin");
  const std::vector<std::vector<std::string>> bad = {
      {},                                                          // nothing
      {"--output", out},                                           // no input
      {"--input", paths[0]},                                       // no output
      {"--input", paths[0], paths[1], "--output", out, "--val-output", val},  // no fraction
      {"--input", paths[0], paths[1], "--output", out, "--val-fraction", "0.5"},  // no path
      {"--input", paths[0], paths[1], "--output", out, "--val-output", val, "--val-fraction", "0"},
      {"--input", paths[0], paths[1], "--output", out, "--val-output", val, "--val-fraction", "1"},
      {"--input", paths[0], paths[1], "--output", out, "--val-output", val, "--val-fraction",
       "1.5"},
      {"--input", paths[0], paths[1], "--output", out, "--val-output", val, "--val-fraction",
       "-0.2"},
      {"--input", paths[0], paths[1], "--output", out, "--val-output", val, "--val-fraction",
       "half"},
      // 3 documents at F = 0.2: floor(0.6) = 0, so validation would be empty.
      {"--input", paths[0], paths[1], paths[2], "--output", out, "--val-output", val,
       "--val-fraction", "0.2"},
      {"--input", paths[0], paths[1], "--output", out, "--val-output", out, "--val-fraction",
       "0.5"},
      {"--input", paths[0], "--output", out, "--no-such-option"},
  };
  for (const std::vector<std::string>& args : bad) {
    const RunResult run = run_tool(args);
    std::string joined;
    for (const std::string& a : args) joined += a + " ";
    EXPECT_EQ(run.exit_code, 2) << joined << "\n" << run.output;
    EXPECT_NE(run.output.find("error"), std::string::npos) << joined << "\n" << run.output;
    EXPECT_FALSE(fs::exists(out)) << joined;
    EXPECT_FALSE(fs::exists(val)) << joined;
  }
}

TEST_F(TokenizeToolTest, MissingInputIsNamedAndNothingIsWritten) {
  const std::vector<std::string> paths = write_documents({"one", "two"});
  const std::string missing = path("no_such_document.txt");
  const RunResult run = run_tool({"--input", paths[0], missing, paths[1], "--output",
                                  path("train.bin"), "--val-output", path("val.bin"),
                                  "--val-fraction", "0.5"});
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.exit_code, 2) << "a missing file is not a command-line error: " << run.output;
  EXPECT_NE(run.output.find(missing), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(path("train.bin")));
  EXPECT_FALSE(fs::exists(path("val.bin")));
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().extension(), ".txt") << "left behind: " << entry.path();
  }
}

TEST_F(TokenizeToolTest, RefusesToOverwriteAnInput) {
  const std::vector<std::string> paths = write_documents({"first document", "second document"});
  fs::create_symlink(paths[1], path("link.bin"));
  const std::string other_spelling = dir_ + "/./doc_0.txt";
  const std::vector<std::vector<std::string>> overwriting = {
      {"--input", paths[0], "--output", paths[0]},
      {"--input", paths[0], paths[1], "--output", other_spelling},
      {"--input", paths[0], paths[1], "--output", path("link.bin")},
      {"--input", paths[0], paths[1], "--output", path("train.bin"), "--val-output", paths[1],
       "--val-fraction", "0.5"},
  };
  for (const std::vector<std::string>& args : overwriting) {
    const RunResult run = run_tool(args);
    std::string joined;
    for (const std::string& a : args) joined += a + " ";
    EXPECT_EQ(run.exit_code, 2) << joined << "\n" << run.output;
    EXPECT_NE(run.output.find("is also an --input file"), std::string::npos)
        << joined << "\n" << run.output;
    EXPECT_NE(run.output.find("refusing to overwrite an input"), std::string::npos) << run.output;
    EXPECT_FALSE(fs::exists(path("train.bin")));
  }
  std::ifstream first(paths[0]), second(paths[1]);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(first), {}), "first document");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(second), {}), "second document");
}

/// Peak resident memory of one gpt2-tokenize run, in bytes (the child's own max RSS).
size_t tool_peak_memory(const std::vector<std::string>& args) {
  const pid_t child = fork();
  if (child == 0) {
    if (freopen("/dev/null", "w", stdout) == nullptr) _exit(126);
    std::vector<char*> argv = {const_cast<char*>(GPT2_TOKENIZE_BINARY)};
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(GPT2_TOKENIZE_BINARY, argv.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  EXPECT_EQ(wait4(child, &status, 0, &usage), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  return static_cast<size_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

TEST_F(TokenizeToolTest, ALongLineWithoutSpacesTakesAboutTenTimesItsSizeInMemory) {
  // 4 MB of random letters is one pre-tokenized piece, the worst case for BPE's working memory
  // (it was 33 bytes per input byte; now the symbols and pair ranks take 8, the text and the
  // ids the rest).
  constexpr size_t kBytes = size_t{4} << 20;
  std::string letters(kBytes, 'a');
  Rng rng(11);
  for (char& c : letters) c = static_cast<char>('a' + rng.uniform_int(26));
  std::ofstream(path("line.txt"), std::ios::binary) << letters;
  std::ofstream(path("tiny.txt"), std::ios::binary) << "a few words";
  const size_t baseline =
      tool_peak_memory({"--input", path("tiny.txt"), "--output", path("t.bin")});
  const size_t peak = tool_peak_memory({"--input", path("line.txt"), "--output", path("l.bin")});
  const double per_byte = static_cast<double>(peak - std::min(peak, baseline)) / kBytes;
  EXPECT_LE(per_byte, 14.0) << "peak " << peak << " bytes, baseline " << baseline;
  // And the ids are still exactly the in-process tokenizer's.
  const std::vector<uint16_t> shard = read_shard(path("l.bin"), 0);
  const std::vector<int> ids = tokenizer_->encode(letters);
  ASSERT_EQ(shard.size(), ids.size() + 1);
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), shard.begin() + 1));
}

// In the folder: relative paths are the point of some cases.
RunResult run_tool_in(const std::string& folder, const std::vector<std::string>& args) {
  std::string command = "cd " + testing::shell_quote(folder) + " && " +
                        testing::shell_quote(GPT2_TOKENIZE_BINARY);
  for (const std::string& arg : args) command += " " + testing::shell_quote(arg);
  return testing::run_command(command);
}

TEST_F(TokenizeToolTest, AnOptionWithoutItsValueExitsTwoNamingIt) {
  const std::vector<std::string> paths = write_documents({"one", "two"});
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--output", "--val-fraction", "0.5"}, "--output needs a value (the next argument, "
                                              "--val-fraction, is an option"},
      {{"--input", paths[0], paths[1], "--output"}, "--output needs a value"},
      {{"--input", "--output", path("o.bin")}, "--input needs a value"},
      {{"--input", paths[0], "--output", path("o.bin"), "--help=1"}, "--help takes no value"},
  };
  for (const auto& c : cases) {
    const RunResult run = run_tool(c.args);
    EXPECT_EQ(run.exit_code, 2) << c.message << "\n" << run.output;
    EXPECT_EQ(run.output.rfind("gpt2-tokenize: error: " + c.message, 0), 0u) << run.output;
    EXPECT_EQ(run.output.find("\u2018"), std::string::npos) << run.output;  // no curly quotes
  }
  EXPECT_FALSE(fs::exists(path("o.bin")));
}

TEST_F(TokenizeToolTest, OutputsThatAreOneFileAreRefused) {
  write_documents({"one", "two"});
  fs::create_symlink("train.bin", path("link.bin"));  // dangling: train.bin is not written yet
  for (const std::vector<std::string>& outputs :
       {std::vector<std::string>{"--output", "./train.bin", "--val-output", "train.bin"},
        std::vector<std::string>{"--output", "train.bin", "--val-output", "link.bin"},
        std::vector<std::string>{"--output", "sub/../train.bin", "--val-output", "train.bin"}}) {
    std::vector<std::string> args = {"--input", "doc_0.txt", "doc_1.txt"};
    args.insert(args.end(), outputs.begin(), outputs.end());
    args.insert(args.end(), {"--val-fraction", "0.5"});
    fs::create_directories(path("sub"));
    const RunResult run = run_tool_in(dir_, args);
    EXPECT_EQ(run.exit_code, 2) << outputs[1] << " " << outputs[3] << "\n" << run.output;
    EXPECT_NE(run.output.find("is the same file as --output"), std::string::npos) << run.output;
    EXPECT_FALSE(fs::exists(path("train.bin")));
  }
}

TEST_F(TokenizeToolTest, OutputsAreWrittenByWhatThePathIs) {
  const std::vector<std::string> paths = write_documents({"first document", "second one"});
  ASSERT_EQ(run_tool({"--input", paths[0], paths[1], "--output", path("plain.bin")}).exit_code, 0);
  const std::vector<char> expected = read_file_bytes(path("plain.bin"));
  {
    SCOPED_TRACE("a symbolic link: written through to its target, the link kept");
    fs::create_directories(path("elsewhere"));
    std::ofstream(path("elsewhere/train.bin")) << "an old shard";
    fs::create_symlink("elsewhere/train.bin", path("train.bin"));
    const RunResult run = run_tool({"--input", paths[0], paths[1], "--output", path("train.bin")});
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_TRUE(fs::is_symlink(path("train.bin")));
    EXPECT_EQ(read_file_bytes(path("elsewhere/train.bin")), expected);
  }
  {
    SCOPED_TRACE("a FIFO: streamed to its reader, still a FIFO");
    testing::FifoReader reader(path("pipe"));
    const RunResult run = run_tool({"--input", paths[0], paths[1], "--output", path("pipe")});
    EXPECT_EQ(reader.finish(), expected);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(fs::status(path("pipe")).type(), fs::file_type::fifo);
  }
  {
    SCOPED_TRACE("a socket: refused, naming the option");
    testing::make_unix_socket(path("sock"));
    const RunResult run = run_tool({"--input", paths[0], "--output", path("sock")});
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find("--output " + path("sock") + " is a socket"), std::string::npos)
        << run.output;
    EXPECT_EQ(fs::status(path("sock")).type(), fs::file_type::socket);
  }
}

TEST_F(TokenizeToolTest, HelpExitsZeroAndListsOptions) {
  for (const char* flag : {"--help", "-h"}) {
    const RunResult run = run_tool({flag});
    EXPECT_EQ(run.exit_code, 0) << flag << "\n" << run.output;
    for (const char* option : {"--input", "--output", "--val-output", "--val-fraction"}) {
      EXPECT_NE(run.output.find(option), std::string::npos) << option << "\n" << run.output;
    }
  }
}

}  // namespace
}  // namespace gpt2
