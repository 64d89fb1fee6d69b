/**
 * @file generate_tool_test.cpp
 * @brief gpt2-generate end to end: runs the binary (GPT2_GENERATE_BINARY) on a small model
 *        file (L=1, C=32, V=50257, maxT=32, random weights) written by the test.
 *
 * - -h exits 0 with the options;
 * - greedy output on stdout is exactly the model's greedy continuation computed in-process
 *   (generate(), decoded, up to the end-of-text), and stderr reports both speeds;
 * - the same --seed gives the same text, another seed another; --num-samples 3 prints every
 *   sample under its header and sample 0 equals --num-samples 1 with that seed;
 * - bad command lines exit 2 with a message naming the problem (no --model, a preset as
 *   --model, an empty prompt, both prompt options, out-of-range numbers, --max-new-tokens past
 *   the context, bf16 on the CPU, unknown options);
 * - file problems exit 1 (a missing or corrupt model file, a missing or empty prompt file, a
 *   model of another vocabulary), and so does --device cuda without a GPU.
 */
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/rng.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "model/hf_checkpoint.h"
#include "model/model.h"
#include "model/parameters.h"
#include "inference/generation.h"
#include "run_command.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

using testing::shell_quote;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

ModelConfig tool_config(int vocab_size = kGpt2VocabSize) {
  ModelConfig c;
  c.max_seq_len = 32;
  c.vocab_size = vocab_size;
  c.padded_vocab_size = padded_vocab(vocab_size);
  c.num_layers = 1;
  c.num_heads = 2;
  c.channels = 32;
  return c;
}

// GPT-2's initialization with the weights scaled up, so the text is not uniform noise.
std::vector<float> tool_parameters(const ModelConfig& config) {
  std::vector<float> params(ParameterLayout::for_config(config).total);
  init_parameters(params.data(), config, 31);
  for (float& p : params) p *= 8.0f;
  return params;
}

class GenerateToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::path(::testing::TempDir()) /
              ("gpt2_generate_tool_test_" + std::to_string(::getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(folder_);
    fs::create_directories(folder_);
    model_ = path("model.bin");
    const ModelConfig config = tool_config();
    write_model_checkpoint(model_, config, tool_parameters(config).data());
  }
  void TearDown() override { fs::remove_all(folder_); }

  std::string path(const std::string& name) const { return (folder_ / name).string(); }

  /// The tool run in `cwd` (default: the test's own working folder).
  RunResult run(const std::vector<std::string>& args, const std::string& cwd = "") const {
    const std::string err_path = path("stderr.txt");
    std::string command = cwd.empty() ? "" : "cd " + shell_quote(cwd) + " && ";
    command += shell_quote(GPT2_GENERATE_BINARY);
    for (const std::string& arg : args) command += " " + shell_quote(arg);
    const testing::CommandResult run =
        testing::run_command(command + " 2>" + shell_quote(err_path), /*join_stderr=*/false);
    return RunResult{run.exit_code, run.output, read_all(err_path)};
  }

  // The usual arguments on the CPU and the test's model.
  std::vector<std::string> cpu_args(std::vector<std::string> more) const {
    std::vector<std::string> args = {"--model", model_, "--device", "cpu"};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  fs::path folder_;
  std::string model_;
};

TEST_F(GenerateToolTest, HelpListsTheOptions) {
  for (const char* flag : {"-h", "--help"}) {
    const RunResult r = run({flag});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (const char* option : {"--model", "--prompt-file", "--max-new-tokens", "--temperature",
                               "--top-k", "--top-p", "--greedy", "--seed", "--num-samples",
                               "--device", "--precision", "--ignore-eos", "--warmup",
                               "--repeats"})
      EXPECT_NE(r.out.find(option), std::string::npos) << option;
  }
}

TEST_F(GenerateToolTest, GreedyTextIsTheModelsGreedyContinuation) {
  const std::string prompt = "In the beginning God created";
  const RunResult r = run(cpu_args({"--prompt", prompt, "--max-new-tokens", "20", "--greedy"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;

  // In-process: the same model, tokenizer and generate().
  Gpt2Tokenizer tokenizer = Gpt2Tokenizer::from_default_files();
  const std::vector<int> tokens = tokenizer.encode(prompt);
  ModelOptions options;
  options.config = tool_config();
  options.seq_len = static_cast<int>(tokens.size()) + 19;
  std::unique_ptr<Model> model = make_cpu_model(options);
  model->set_parameters(read_model_checkpoint(model_).params.data());
  GenerationOptions generation;
  generation.max_new_tokens = 20;
  generation.sampling.greedy = true;
  std::vector<Rng> rngs = sequence_rngs(0, 1);
  std::vector<int> produced = generate(*model, tokens, generation, rngs)[0];
  if (!produced.empty() && produced.back() == Gpt2Tokenizer::kEndOfText) produced.pop_back();
  ASSERT_FALSE(produced.empty());
  EXPECT_EQ(r.out, tokenizer.decode(produced) + "\n");

  EXPECT_NE(r.err.find("prompt " + std::to_string(tokens.size()) + " tokens"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("prefill "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("decode "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" tokens/s"), std::string::npos) << r.err;
}

// The benchmark options: --ignore-eos decodes exactly --max-new-tokens tokens (what generate()
// gives without stopping), warm-up and repeated runs print the text once, and the timing line
// for scripts is there.
TEST_F(GenerateToolTest, BenchmarkOptionsPrintTheTextOnceAndReportTimes) {
  const std::string prompt = "In the beginning God created";
  const RunResult r = run(cpu_args({"--prompt", prompt, "--max-new-tokens", "15", "--greedy",
                                    "--ignore-eos", "--warmup", "1", "--repeats", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;

  Gpt2Tokenizer tokenizer = Gpt2Tokenizer::from_default_files();
  const std::vector<int> tokens = tokenizer.encode(prompt);
  ModelOptions options;
  options.config = tool_config();
  options.seq_len = static_cast<int>(tokens.size()) + 14;
  std::unique_ptr<Model> model = make_cpu_model(options);
  model->set_parameters(read_model_checkpoint(model_).params.data());
  GenerationOptions generation;
  generation.max_new_tokens = 15;
  generation.sampling.greedy = true;
  generation.stop_at_end_of_text = false;
  std::vector<Rng> rngs = sequence_rngs(0, 1);
  const std::vector<int> produced = generate(*model, tokens, generation, rngs)[0];
  ASSERT_EQ(produced.size(), 15u);
  EXPECT_EQ(r.out, tokenizer.decode(produced) + "\n");

  EXPECT_NE(r.err.find("(median of 3 runs after 1 warm-up run)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("end to end "), std::string::npos) << r.err;
  for (const char* key : {"gpt2-generate: timing prefill_tokens=", " prefill_s=",
                          " decode_steps=14 ", " decode_tokens_per_s=", " generated_tokens=15 ",
                          " end_to_end_s=", " warmup=1 repeats=3"})
    EXPECT_NE(r.err.find(key), std::string::npos) << key << " in " << r.err;
  const RunResult bad = run(cpu_args({"--warmup", "-1"}));
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  const RunResult zero = run(cpu_args({"--repeats", "0"}));
  EXPECT_EQ(zero.exit_code, 2) << zero.err;
}

// A Hugging Face directory (hf:DIR or a directory holding config.json) generates the same text
// as the llm.c file it was converted from.
TEST_F(GenerateToolTest, HuggingFaceDirectoryGeneratesLikeItsLlmcFile) {
  const ModelCheckpoint weights = read_model_checkpoint(model_);
  const std::string hf_dir = path("hf-model");
  write_hf_model(hf_dir, weights.config, weights.params.data());
  const std::vector<std::string> common = {"--device", "cpu", "--prompt", "And God said",
                                           "--max-new-tokens", "12", "--seed", "7"};
  auto with_model = [&](const std::string& model) {
    std::vector<std::string> args = {"--model", model};
    args.insert(args.end(), common.begin(), common.end());
    return run(args);
  };
  const RunResult from_bin = with_model(model_);
  ASSERT_EQ(from_bin.exit_code, 0) << from_bin.err;
  for (const std::string& model : {"hf:" + hf_dir, hf_dir}) {
    const RunResult from_hf = with_model(model);
    ASSERT_EQ(from_hf.exit_code, 0) << model << ": " << from_hf.err;
    EXPECT_EQ(from_hf.out, from_bin.out) << model;
  }
  const RunResult missing = with_model("hf:" + path("no-such-dir"));
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
}

TEST_F(GenerateToolTest, SeedsAndSamples) {
  const std::string prompt_file = path("prompt.txt");
  std::ofstream(prompt_file) << "And the earth was without form";
  auto sample = [&](const std::string& seed, const std::string& n) {
    return run(cpu_args({"--prompt-file", prompt_file, "--max-new-tokens", "12", "--seed", seed,
                         "--num-samples", n, "--top-k", "100", "--top-p", "0.95",
                         "--temperature", "0.9"}));
  };
  const RunResult a = sample("5", "1"), again = sample("5", "1"), other = sample("6", "1");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, again.out);
  EXPECT_NE(a.out, other.out);

  const RunResult three = sample("5", "3");
  ASSERT_EQ(three.exit_code, 0) << three.err;
  std::vector<std::string> texts(3);
  for (int i = 0; i < 3; ++i) {
    const std::string header = "=== sample " + std::to_string(i) + " ===\n";
    const size_t at = three.out.find(header);
    ASSERT_NE(at, std::string::npos) << three.out;
    const size_t start = at + header.size();
    const size_t next = three.out.find("=== sample ", start);
    texts[i] = three.out.substr(start, next == std::string::npos ? next : next - start);
  }
  EXPECT_EQ(texts[0], a.out);  // sample 0 draws from Rng(seed), as a single sample does
  EXPECT_NE(texts[1], texts[0]);
  EXPECT_NE(three.err.find("3 samples"), std::string::npos) << three.err;
}

TEST_F(GenerateToolTest, BadCommandLinesExitTwo) {
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{"--prompt", "hi"}, "--model is required"},
      {{"--model", "d2", "--prompt", "hi"}, "preset name"},
      {cpu_args({"--prompt", ""}), "--prompt is empty"},
      {cpu_args({"--prompt", "a", "--prompt-file", model_}), "not both"},
      {cpu_args({"--max-new-tokens", "0"}), "--max-new-tokens must be a positive integer"},
      {cpu_args({"--max-new-tokens", "x"}), "--max-new-tokens must be a positive integer"},
      {cpu_args({"--prompt", "one two three", "--max-new-tokens", "31"}),
       "the model's context is 32 (at most 30 new tokens fit)"},
      {cpu_args({"--prompt", std::string(200, 'a') + " b c d e f g h i j k l m n o p q r s t u v "
                             "w x y z a b c d e f g"}),
       "longer than the model's context of 32 tokens"},
      {cpu_args({"--temperature=-1"}), "--temperature must be a non-negative number"},
      {cpu_args({"--top-p", "0"}), "--top-p must be a number in (0, 1]"},
      {cpu_args({"--top-p", "1.5"}), "--top-p must be a number in (0, 1]"},
      {cpu_args({"--top-k=-1"}), "--top-k must be a non-negative integer"},
      {cpu_args({"--num-samples", "0"}), "--num-samples must be a positive integer"},
      {cpu_args({"--seed=-3"}), "--seed must be a non-negative integer"},
      {cpu_args({"--precision", "bf16"}), "--precision bf16 needs --device cuda"},
      {cpu_args({"--precision", "fp16"}), "--precision must be fp32 or bf16"},
      {{"--model", model_, "--device", "gpu"}, "--device must be auto, cuda or cpu"},
      {cpu_args({"--frobnicate", "1"}), "unknown option '--frobnicate'"},
      {cpu_args({"stray"}), "unexpected argument 'stray'"},
  };
  for (const Case& c : cases) {
    const RunResult r = run(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.message << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("gpt2-generate: error: "), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << c.message;
  }
}

TEST_F(GenerateToolTest, FileAndDeviceProblemsExitOne) {
  const std::string empty = path("empty.txt");
  std::ofstream{empty};
  const std::string corrupt = path("corrupt.bin");
  std::ofstream(corrupt) << "not a model";
  const std::string other_vocab = path("other_vocab.bin");
  const ModelConfig small_vocab = tool_config(1000);
  write_model_checkpoint(other_vocab, small_vocab, tool_parameters(small_vocab).data());
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--model", path("missing.bin"), "--device", "cpu"}, "missing.bin: no such file"},
      {{"--model", corrupt, "--device", "cpu"}, "corrupt.bin"},
      {{"--model", other_vocab, "--device", "cpu"}, "vocabulary of 1000 tokens"},
      {cpu_args({"--prompt-file", path("nowhere.txt")}), "nowhere.txt"},
      {cpu_args({"--prompt-file", empty}), "empty.txt is empty"},
  };
  for (const Case& c : cases) {
    const RunResult r = run(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.message << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
  if (!cuda_backend_available()) {
    const RunResult r = run({"--model", model_, "--device", "cuda"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("--device cuda: no usable CUDA device"), std::string::npos) << r.err;
  }
}

TEST_F(GenerateToolTest, AnOptionWithoutItsValueExitsTwoNamingIt) {
  for (const auto& [args, message] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--model", "--prompt", "hi"}, "--model needs a value (the next argument, --prompt"},
           {cpu_args({"--prompt"}), "--prompt needs a value"},
           {cpu_args({"--seed", "--greedy"}), "--seed needs a value"},
           {cpu_args({"--greedy=1"}), "--greedy takes no value (got '1')"}}) {
    const RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 2) << message << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("gpt2-generate: error: " + message, 0), 0u) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

// --model names what it names for gpt2-train: a preset that is also a Hugging Face directory in
// the working folder is ambiguous (exit 2, "write hf:d2"), not a file that is a directory.
TEST_F(GenerateToolTest, APresetNameBesideAModelDirectoryIsAmbiguousAsInGpt2Train) {
  const ModelConfig config = tool_config();
  write_hf_model(path("d2"), config, tool_parameters(config).data());
  const RunResult ambiguous = run({"--model", "d2", "--device", "cpu"}, folder_.string());
  EXPECT_EQ(ambiguous.exit_code, 2) << ambiguous.err;
  EXPECT_NE(ambiguous.err.find("--model d2 is both a preset and a directory holding config.json: "
                               "write hf:d2"),
            std::string::npos)
      << ambiguous.err;
  const RunResult named = run({"--model", "hf:d2", "--device", "cpu", "--max-new-tokens", "2",
                               "--greedy"},
                              folder_.string());
  EXPECT_EQ(named.exit_code, 0) << named.err;
  fs::create_directories(path("d3"));  // no config.json: the preset, which has no weights
  const RunResult preset = run({"--model", "d3", "--device", "cpu"}, folder_.string());
  EXPECT_EQ(preset.exit_code, 2) << preset.err;
  EXPECT_NE(preset.err.find("is a preset name"), std::string::npos) << preset.err;
}

}  // namespace
}  // namespace gpt2
