/**
 * @file convert_tool_test.cpp
 * @brief gpt2-convert end to end: runs the binary (GPT2_CONVERT_BINARY) on temporary files.
 *
 * llm.c file -> Hugging Face directory -> llm.c file through the command line is bit-identical,
 * and --dtype bf16 writes what write_model_checkpoint writes in bf16; --print-logits prints the
 * same logits for a file and its conversion, equal to the CPU model's run here; every bad
 * command line exits 2 and every bad file 1, naming the option or the file, and leaves no
 * output behind; an output is written by what its path is (a link through to its target, a
 * device in place, a socket refused); a config.json whose n_layer the tensors do not hold is
 * refused naming the field before it sizes anything (run under a 2 GB address-space limit).
 */
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "base/json.h"
#include "data/paths.h"
#include "model/checkpoint.h"
#include "model/cpu_model.h"
#include "model/hf_checkpoint.h"
#include "model/parameters.h"
#include "run_command.h"
#include "special_files.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;

using RunResult = testing::CommandResult;

RunResult run_convert(const std::vector<std::string>& args) {
  return testing::run_binary(GPT2_CONVERT_BINARY, args);
}

std::string bytes_of(const std::string& path) {
  const std::vector<char> bytes = read_file_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

class ConvertToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = (fs::path(::testing::TempDir()) /
               ("gpt2_convert_tool_test_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                  .string();
    fs::remove_all(folder_);
    fs::create_directories(folder_);
    config_ = model_config_from_preset("d1", 64);
    params_.resize(ParameterLayout::for_config(config_).total);
    init_parameters(params_.data(), config_, 42);
    // Non-trivial LayerNorm parameters and biases, so their mapping is exercised too.
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i] == 0.0f || params_[i] == 1.0f) params_[i] += 0.001f * static_cast<float>(i % 97);
    const ParameterLayout layout = ParameterLayout::for_config(config_);
    std::fill(params_.begin() + layout.offsets[kWte] + size_t(config_.vocab_size) * config_.channels,
              params_.begin() + layout.offsets[kWte] + layout.sizes[kWte], 0.0f);  // padding rows
    bin_ = path("model.bin");
    write_model_checkpoint(bin_, config_, params_.data());
  }
  void TearDown() override { fs::remove_all(folder_); }

  std::string path(const std::string& name) const { return folder_ + "/" + name; }

  std::string folder_;
  ModelConfig config_;
  std::vector<float> params_;
  std::string bin_;
};

TEST_F(ConvertToolTest, BinToHfToBinIsBitIdenticalAndBf16MatchesTheCheckpointWriter) {
  const RunResult to_hf = run_convert({"--input", bin_, "--output", path("hf/nested")});
  ASSERT_EQ(to_hf.exit_code, 0) << to_hf.output;
  EXPECT_TRUE(fs::exists(path("hf/nested/config.json")));
  EXPECT_TRUE(fs::exists(path("hf/nested/model.safetensors")));
  const RunResult back = run_convert({"--input", path("hf/nested"), "--output", path("back.bin")});
  ASSERT_EQ(back.exit_code, 0) << back.output;
  EXPECT_TRUE(bytes_of(bin_) == bytes_of(path("back.bin")));

  // hf: spellings on both sides; --dtype bf16 is the checkpoint writer's bf16 file.
  const RunResult to_hf2 = run_convert({"--input", bin_, "--output", "hf:" + path("hf2")});
  ASSERT_EQ(to_hf2.exit_code, 0) << to_hf2.output;
  const RunResult bf16 = run_convert(
      {"--input", "hf:" + path("hf2"), "--output", path("bf16.bin"), "--dtype", "bf16"});
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  write_model_checkpoint(path("reference_bf16.bin"), config_, params_.data(), kModelVersionBf16);
  EXPECT_TRUE(bytes_of(path("bf16.bin")) == bytes_of(path("reference_bf16.bin")));
}

std::vector<std::vector<float>> logits_of(const RunResult& result) {
  const Json json = parse_json(result.output, "gpt2-convert --print-logits");
  std::vector<std::vector<float>> rows;
  for (const Json& row : json.at("logits")) rows.push_back(row.get<std::vector<float>>());
  return rows;
}

// A directory transformers' text-generation pipeline loads alone: GPT-2's tokenizer files (the
// project's own, byte for byte), their settings and the generation config; a model of another
// vocabulary gets the generation config only, and the tool says why.
TEST_F(ConvertToolTest, TheHfDirectoryHoldsTheTokenizerAndTheGenerationConfig) {
  const RunResult to_hf = run_convert({"--input", bin_, "--output", path("hf")});
  ASSERT_EQ(to_hf.exit_code, 0) << to_hf.output;
  EXPECT_TRUE(bytes_of(path("hf/vocab.json")) == bytes_of(tokenizer_dir() + "/encoder.json"));
  EXPECT_TRUE(bytes_of(path("hf/merges.txt")) == bytes_of(tokenizer_dir() + "/vocab.bpe"));
  const Json tokenizer = Json::parse(read_file_text(path("hf/tokenizer_config.json")));
  EXPECT_EQ(tokenizer.at("tokenizer_class"), "GPT2Tokenizer");
  EXPECT_EQ(tokenizer.at("eos_token"), "<|endoftext|>");
  EXPECT_EQ(tokenizer.at("model_max_length"), config_.max_seq_len);
  const Json special = Json::parse(read_file_text(path("hf/special_tokens_map.json")));
  EXPECT_EQ(special.at("bos_token"), "<|endoftext|>");
  const Json generation = Json::parse(read_file_text(path("hf/generation_config.json")));
  EXPECT_EQ(generation.at("eos_token_id"), 50256);
  EXPECT_EQ(generation.at("bos_token_id"), 50256);
  EXPECT_NE(to_hf.output.find("vocab.json, merges.txt"), std::string::npos) << to_hf.output;

  ModelConfig small = config_;
  small.vocab_size = 300;
  small.padded_vocab_size = 320;
  std::vector<float> params(ParameterLayout::for_config(small).total);
  init_parameters(params.data(), small, 3);
  write_model_checkpoint(path("small.bin"), small, params.data());
  const RunResult small_hf = run_convert({"--input", path("small.bin"), "--output", path("hf3")});
  ASSERT_EQ(small_hf.exit_code, 0) << small_hf.output;
  EXPECT_TRUE(fs::exists(path("hf3/generation_config.json")));
  EXPECT_FALSE(fs::exists(path("hf3/vocab.json")));
  EXPECT_NE(small_hf.output.find("no tokenizer files"), std::string::npos) << small_hf.output;
}

TEST_F(ConvertToolTest, PrintLogitsOfAFileAndOfItsConversionAgreeWithTheCpuModel) {
  ASSERT_EQ(run_convert({"--input", bin_, "--output", path("hf")}).exit_code, 0);
  const std::vector<int> tokens = {464, 2068, 7586, 21831, 50256};
  const RunResult from_bin = run_convert({"--input", bin_, "--print-logits", "464,2068,7586,21831,50256"});
  const RunResult from_hf =
      run_convert({"--input", path("hf"), "--print-logits", "464,2068,7586,21831,50256"});
  ASSERT_EQ(from_bin.exit_code, 0) << from_bin.output.substr(0, 500);
  ASSERT_EQ(from_hf.exit_code, 0) << from_hf.output.substr(0, 500);
  const Json json = parse_json(from_hf.output, "output");
  EXPECT_EQ(json.at("tokens").get<std::vector<int>>(), tokens);
  EXPECT_EQ(json.at("vocab_size"), config_.vocab_size);

  CpuGpt2<float> gpt2(config_, 1, static_cast<int>(tokens.size()), AttentionKind::kNaive);
  std::copy(params_.begin(), params_.end(), gpt2.params());
  gpt2.forward(tokens.data(), nullptr, 1, static_cast<int>(tokens.size()));
  const std::vector<std::vector<float>> bin_rows = logits_of(from_bin);
  const std::vector<std::vector<float>> hf_rows = logits_of(from_hf);
  ASSERT_EQ(hf_rows.size(), tokens.size());
  EXPECT_EQ(bin_rows, hf_rows);
  for (size_t t = 0; t < tokens.size(); ++t) {
    ASSERT_EQ(hf_rows[t].size(), size_t(config_.vocab_size));
    const float* expected = gpt2.buffer(kBufLogits) + t * config_.padded_vocab_size;
    EXPECT_TRUE(std::equal(hf_rows[t].begin(), hf_rows[t].end(), expected)) << "position " << t;
  }
}

TEST_F(ConvertToolTest, ExitCodesAndMessages) {
  ASSERT_EQ(run_convert({"--input", bin_, "--output", path("hf")}).exit_code, 0);
  std::ofstream(path("corrupt.bin"), std::ios::binary) << "not a model";
  fs::create_directories(path("corrupt_hf"));
  fs::copy_file(path("hf/config.json"), path("corrupt_hf/config.json"));
  std::ofstream(path("corrupt_hf/model.safetensors"), std::ios::binary) << "\x08";
  std::ofstream(path("a_file"), std::ios::binary) << "x";
  fs::create_directories(path("existing_dir"));
  const std::string hf = path("hf");
  std::string sixty_five_tokens = "1";
  for (int i = 1; i < 65; ++i) sixty_five_tokens += ",1";
  const struct {
    std::vector<std::string> args;
    int exit_code;
    std::string message;
  } cases[] = {
      {{"-h"}, 0, "Usage:"},
      {{"--help"}, 0, "--print-logits"},
      {{}, 2, "--input is required"},
      {{"--input", bin_}, 2, "--output is required"},
      {{"--input", bin_, "--output", path("x"), "--dtype", "bf16"}, 2,
       "--dtype bf16: the input is an llm.c file"},
      {{"--input", hf, "--output", path("x.bin"), "--dtype", "fp16"}, 2,
       "--dtype must be fp32 or bf16 (got 'fp16')"},
      {{"--input", bin_, "--output", bin_}, 2, "refusing to overwrite an input"},
      {{"--input", hf, "--output", hf + "/model.safetensors"}, 2, "refusing to overwrite an input"},
      {{"--input", hf, "--output", hf + "/../hf/config.json"}, 2, "refusing to overwrite an input"},
      {{"--input", "hf:" + hf, "--output", hf}, 2, "refusing to overwrite an input"},
      {{"--input", hf, "--output", "hf:" + path("y")}, 2, "the output is an llm.c model file"},
      {{"--input", bin_, "--output", path("x"), "--print-logits", "1"}, 2, "not both"},
      {{"--input", bin_, "--print-logits", "1,x"}, 2, "--print-logits must be comma-separated"},
      {{"--input", bin_, "--print-logits", "1,,2"}, 2, "--print-logits must be comma-separated"},
      {{"--input", bin_, "--print-logits", "50257"}, 2, "token 50257 is not below"},
      {{"--input", bin_, "--print-logits", sixty_five_tokens}, 2,
       "65 tokens exceed the model's context (64)"},
      {{"--input", bin_, "--output", path("x"), "--frobnicate"}, 2, "frobnicate"},
      {{"--input", path("missing.bin"), "--output", path("x")}, 1,
       path("missing.bin") + ": no such file"},
      {{"--input", "hf:" + path("missing"), "--output", path("x.bin")}, 1,
       path("missing") + ": no such directory"},
      {{"--input", path("existing_dir"), "--output", path("x.bin")}, 1,
       "a directory without config.json"},
      {{"--input", path("corrupt.bin"), "--output", path("out_hf")}, 1, path("corrupt.bin") + ": "},
      {{"--input", path("corrupt_hf"), "--output", path("out.bin")}, 1,
       path("corrupt_hf/model.safetensors") + ": "},
      {{"--input", hf, "--output", path("existing_dir")}, 1, "is a directory"},
      {{"--input", bin_, "--output", path("a_file")}, 1, path("a_file")},
  };
  for (const auto& c : cases) {
    std::string shown;
    for (const std::string& arg : c.args) shown += " " + arg;
    const RunResult result = run_convert(c.args);
    EXPECT_EQ(result.exit_code, c.exit_code) << shown << "\n" << result.output;
    EXPECT_NE(result.output.find(c.message), std::string::npos)
        << shown << "\n" << result.output << "\nexpected: " << c.message;
  }
  // Nothing was written by the failures: no output, no temporary file.
  for (const char* name : {"x", "x.bin", "y", "out_hf", "out.bin"})
    EXPECT_FALSE(fs::exists(path(name))) << name;
  for (const auto& entry : fs::recursive_directory_iterator(folder_))
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  EXPECT_EQ(bytes_of(path("a_file")), "x");
}

TEST_F(ConvertToolTest, AnOptionWithoutItsValueExitsTwoNamingIt) {
  for (const auto& [args, message] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--input", "--output", path("x.bin")}, "--input needs a value"},
           {{"--input", bin_, "--output"}, "--output needs a value"},
           {{"--input", bin_, "--print-logits", "--output", path("x")},
            "--print-logits needs a value"}}) {
    const RunResult run = run_convert(args);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_EQ(run.output.rfind("gpt2-convert: error: " + message, 0), 0u) << run.output;
  }
  EXPECT_FALSE(fs::exists(path("x.bin")));
  EXPECT_FALSE(fs::exists(path("x")));
}

TEST_F(ConvertToolTest, OutputsAreWrittenByWhatThePathIs) {
  ASSERT_EQ(run_convert({"--input", bin_, "--output", path("hf")}).exit_code, 0);
  {
    SCOPED_TRACE("a symbolic link: written through to its target, the link kept");
    fs::create_directories(path("elsewhere"));
    std::ofstream(path("elsewhere/model.bin")) << "an old model";
    fs::create_symlink("elsewhere/model.bin", path("link.bin"));
    const RunResult run = run_convert({"--input", path("hf"), "--output", path("link.bin")});
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_TRUE(fs::is_symlink(path("link.bin")));
    EXPECT_TRUE(bytes_of(path("elsewhere/model.bin")) == bytes_of(bin_));
  }
  {
    SCOPED_TRACE("a socket: refused, naming the option");
    testing::make_unix_socket(path("sock"));
    const RunResult run = run_convert({"--input", path("hf"), "--output", path("sock")});
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find("--output " + path("sock") + " is a socket"), std::string::npos)
        << run.output;
  }
  {
    SCOPED_TRACE("a character device (numbered like /dev/null): written in place");
    if (::mknod(path("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
      std::printf("[  SKIPPED ] the character device case: mknod: %s\n", std::strerror(errno));
    } else {
      const RunResult run = run_convert({"--input", path("hf"), "--output", path("null")});
      EXPECT_EQ(run.exit_code, 0) << run.output;
      EXPECT_EQ(fs::status(path("null")).type(), fs::file_type::character);
    }
  }
}

TEST_F(ConvertToolTest, ALayerCountTheTensorsDoNotHoldIsRefusedBeforeAnyAllocation) {
  ASSERT_EQ(run_convert({"--input", bin_, "--output", path("hf")}).exit_code, 0);
  const Json config = parse_json(bytes_of(path("hf/config.json")), "config.json");
  for (const int64_t layers : {int64_t{100000000}, int64_t{2147483647}, int64_t{2}}) {
    const std::string dir = path("layers_" + std::to_string(layers));
    fs::create_directories(dir);
    fs::copy_file(path("hf/model.safetensors"), dir + "/model.safetensors");
    Json edited = config;
    edited["n_layer"] = layers;
    std::ofstream(dir + "/config.json") << edited.dump();
    // A bounded address space: tables sized by n_layer would end in bad_alloc within seconds.
    const RunResult run = testing::run_command(
        "ulimit -v 2000000 && " + testing::shell_quote(GPT2_CONVERT_BINARY) + " --input " +
        testing::shell_quote(dir) + " --output " + testing::shell_quote(dir + "/out.bin"));
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_EQ(run.output.rfind("gpt2-convert: error: " + dir + "/config.json: field 'n_layer' is " +
                               std::to_string(layers) + " but " + dir +
                               "/model.safetensors holds the tensors of 1 layer(s), h.0 to h.0",
                               0),
              0u)
        << run.output;
    EXPECT_FALSE(fs::exists(dir + "/out.bin"));
  }
}

}  // namespace
}  // namespace gpt2
