// gpt2-convert: llm.c model files <-> Hugging Face GPT-2 directories (config.json +
// model.safetensors), and the logits of a model for comparison with transformers.
//
//   gpt2-convert --input MODEL.bin --output DIR                       llm.c -> Hugging Face
//   gpt2-convert --input DIR --output MODEL.bin [--dtype fp32|bf16]   Hugging Face -> llm.c
//   gpt2-convert --input MODEL --print-logits 464,2068,7586           logits as JSON on stdout
//
// The direction comes from the input: a directory holding config.json (or hf:DIR) is a Hugging
// Face model, anything else an llm.c model file. The Hugging Face output is F32 safetensors in a
// directory created when missing (model/hf_checkpoint.h); the llm.c output is version 3 (fp32,
// exact) or 5 (--dtype bf16, round to nearest even). Every file is written atomically and only
// after the whole input has been read and checked, so a failure leaves no half-written output;
// an output that would overwrite an input file (the same device and inode, or the same path once
// normalized and its links followed) is refused before anything is read. Outputs are written as
// base/file_io.h says: regular files atomically, a symbolic link through to its target, a
// character device or FIFO streamed; a socket or block device is refused (exit 2).
// --print-logits runs the CPU reference model (fp32, naive attention) on the tokens and prints
// {"model", "tokens", "vocab_size", "logits": T rows of V floats} (shortest round-trip decimals)
// on one line: bench/hf_logits_check.py compares them with transformers' logits.
// Exit codes: 0 success, 1 bad input file or other error, 2 bad command line.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <cxxopts.hpp>

#include "base/command_line.h"
#include "base/error.h"
#include "base/file_io.h"
#include "base/json.h"
#include "model/checkpoint.h"
#include "model/cpu_model.h"
#include "model/hf_checkpoint.h"
#include "model/parameters.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;

struct ConvertOptions {
  std::string input;        // as typed
  std::string hf_input;     // the Hugging Face directory when the input is one, else empty
  std::string output;       // a directory (llm.c -> HF) or a file (HF -> llm.c)
  int32_t version = kModelVersionFp32;  // of an llm.c output
  std::vector<int> logits_tokens;       // --print-logits; empty otherwise
};

cxxopts::Options make_options() {
  cxxopts::Options options(
      "gpt2-convert",
      "Convert GPT-2 models between llm.c model files and Hugging Face directories "
      "(config.json + model.safetensors); the direction comes from --input.");
  options.custom_help(
      "--input MODEL.bin --output DIR | --input DIR --output MODEL.bin [--dtype fp32|bf16] | "
      "--input MODEL --print-logits TOKENS");
  options.add_options()
      ("input", "an llm.c model file, or a Hugging Face directory (hf:DIR, or a directory "
       "holding config.json)", cxxopts::value<std::string>())
      ("output", "the Hugging Face directory to write (llm.c input), created when missing; or "
       "the llm.c model file to write (Hugging Face input)", cxxopts::value<std::string>())
      ("dtype", "parameters of an llm.c output: fp32 (version 3) | bf16 (version 5); a Hugging "
       "Face output is always F32", cxxopts::value<std::string>())
      ("print-logits", "comma-separated token ids: print the CPU model's logits at every "
       "position (T rows of V) as one line of JSON instead of converting",
       cxxopts::value<std::string>())
      ("h,help", "print this help");
  return options;
}

std::vector<int> parse_tokens(const std::string& text) {
  std::vector<int> tokens;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    errno = 0;
    char* end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size() || errno == ERANGE || value < 0 ||
        value > INT32_MAX)
      GPT2_USAGE_FAIL("--print-logits must be comma-separated token ids, e.g. 464,2068 (got '",
                      text, "')");
    tokens.push_back(static_cast<int>(value));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return tokens;
}

ConvertOptions parse_command_line(int argc, char** argv, bool* help) {
  cxxopts::Options options = make_options();
  const cxxopts::ParseResult result = parse_tool_options(options, argc, argv);
  *help = result.count("help") > 0;
  ConvertOptions opts;
  if (*help) return opts;
  if (!result.unmatched().empty())
    GPT2_USAGE_FAIL("unexpected argument '", result.unmatched()[0], "' (see --help)");

  if (result.count("input") == 0) GPT2_USAGE_FAIL("--input is required (see --help)");
  opts.input = result["input"].as<std::string>();
  if (opts.input.empty()) GPT2_USAGE_FAIL("--input is empty");
  const bool print_logits = result.count("print-logits") > 0;
  if (print_logits && result.count("output") > 0)
    GPT2_USAGE_FAIL("give --output (convert) or --print-logits (print logits), not both");
  if (!print_logits && result.count("output") == 0)
    GPT2_USAGE_FAIL("--output is required, or --print-logits (see --help)");
  if (print_logits) {
    if (result.count("dtype")) GPT2_USAGE_FAIL("--dtype applies to a conversion's output");
    opts.logits_tokens = parse_tokens(result["print-logits"].as<std::string>());
  } else {
    opts.output = result["output"].as<std::string>();
    if (opts.output.empty()) GPT2_USAGE_FAIL("--output is empty");
  }

  // The input's kind decides the direction (a missing or bad hf:DIR throws, exit code 1).
  opts.hf_input = hf_model_dir_of(opts.input);
  std::error_code ec;
  if (opts.hf_input.empty() && fs::is_directory(opts.input, ec))
    GPT2_FAIL(opts.input, ": a directory without ", kHfConfigFile, " (a Hugging Face model "
              "directory holds ", kHfConfigFile, " and ", kHfWeightsFile, ")");
  if (print_logits) return opts;

  const bool to_hf = opts.hf_input.empty();
  const std::string dtype = result.count("dtype") ? result["dtype"].as<std::string>() : "fp32";
  if (dtype != "fp32" && dtype != "bf16")
    GPT2_USAGE_FAIL("--dtype must be fp32 or bf16 (got '", dtype, "')");
  if (to_hf && dtype != "fp32")
    GPT2_USAGE_FAIL("--dtype ", dtype, ": the input is an llm.c file, so the output is a Hugging "
                    "Face directory, which is written as F32; --dtype applies to an llm.c output");
  opts.version = dtype == "bf16" ? kModelVersionBf16 : kModelVersionFp32;
  const std::string prefix = kHfModelPrefix;
  if (opts.output.compare(0, prefix.size(), prefix) == 0) {
    if (!to_hf)
      GPT2_USAGE_FAIL("--output ", opts.output, ": the input is a Hugging Face directory, so "
                      "the output is an llm.c model file");
    opts.output = opts.output.substr(prefix.size());
    if (opts.output.empty()) GPT2_USAGE_FAIL("--output hf: takes a directory");
  }

  // Every file the conversion reads against every path it writes.
  std::vector<std::string> inputs = {opts.input};
  if (!to_hf) {
    inputs = {opts.hf_input, (fs::path(opts.hf_input) / kHfConfigFile).string(),
              (fs::path(opts.hf_input) / kHfWeightsFile).string()};
  }
  std::vector<std::string> outputs = {opts.output};
  if (to_hf) {
    outputs.push_back((fs::path(opts.output) / kHfConfigFile).string());
    outputs.push_back((fs::path(opts.output) / kHfWeightsFile).string());
  }
  std::vector<CommandPath> paths;
  for (const std::string& output : outputs) paths.push_back({"--output", output, true});
  for (const std::string& input : inputs) paths.push_back({"--input", input, false});
  refuse_shared_outputs(paths);
  for (const std::string& output : outputs) check_output_path("--output", output);
  if (!to_hf && fs::is_directory(opts.output, ec))
    GPT2_FAIL(opts.output, ": is a directory; the input is a Hugging Face directory, so the "
              "output is an llm.c model file (e.g. ", (fs::path(opts.output) / "model.bin").string(),
              ")");
  return opts;
}

struct LoadedModel {
  ModelConfig config;
  std::vector<float> params;
};

LoadedModel load_model(const ConvertOptions& opts) {
  if (!opts.hf_input.empty()) {
    HfModel model = read_hf_model(opts.hf_input);
    return {model.config, std::move(model.params)};
  }
  ModelCheckpoint checkpoint = read_model_checkpoint(opts.input);
  return {checkpoint.config, std::move(checkpoint.params)};
}

void print_logits(const ConvertOptions& opts, const LoadedModel& model) {
  const std::vector<int>& tokens = opts.logits_tokens;
  const int T = static_cast<int>(tokens.size());
  const ModelConfig& config = model.config;
  if (T > config.max_seq_len)
    GPT2_USAGE_FAIL("--print-logits: ", T, " tokens exceed the model's context (",
                    config.max_seq_len, ")");
  for (const int token : tokens)
    if (token >= config.vocab_size)
      GPT2_USAGE_FAIL("--print-logits: token ", token, " is not below the vocabulary size ",
                      config.vocab_size);
  CpuGpt2<float> gpt2(config, 1, T, AttentionKind::kNaive);
  std::copy(model.params.begin(), model.params.end(), gpt2.params());
  gpt2.forward(tokens.data(), nullptr, 1, T);
  const float* logits = gpt2.buffer(kBufLogits);  // (1, T, Vp)
  Json rows = Json::array();
  for (int t = 0; t < T; ++t) {
    Json row = Json::array();
    const float* row_logits = logits + static_cast<size_t>(t) * config.padded_vocab_size;
    for (int v = 0; v < config.vocab_size; ++v) row.push_back(json_float(row_logits[v]));
    rows.push_back(std::move(row));
  }
  Json out = Json::object();
  out["model"] = opts.input;
  out["tokens"] = tokens;
  out["vocab_size"] = config.vocab_size;
  out["logits"] = std::move(rows);
  std::printf("%s\n", dump_json(out).c_str());
}

void run(const ConvertOptions& opts) {
  const LoadedModel model = load_model(opts);
  if (!opts.logits_tokens.empty()) {
    print_logits(opts, model);
    return;
  }
  if (opts.hf_input.empty()) {
    write_hf_model(opts.output, model.config, model.params.data());
    std::string files = str_cat(kHfConfigFile, ", ", kHfWeightsFile);
    for (const std::string& name : write_hf_generation_files(opts.output, model.config))
      files += ", " + name;
    std::printf("gpt2-convert: %s (llm.c, %s) -> %s (Hugging Face: %s)\n", opts.input.c_str(),
                model.config.describe().c_str(), opts.output.c_str(), files.c_str());
    if (model.config.vocab_size != 50257)
      std::printf("gpt2-convert: no tokenizer files: the model's vocabulary (%d) is not "
                  "GPT-2's (50257)\n", model.config.vocab_size);
  } else {
    write_model_checkpoint(opts.output, model.config, model.params.data(), opts.version);
    std::printf("gpt2-convert: %s (Hugging Face, %s) -> %s (llm.c version %d, %s)\n",
                opts.hf_input.c_str(), model.config.describe().c_str(), opts.output.c_str(),
                opts.version, opts.version == kModelVersionBf16 ? "bf16" : "fp32");
  }
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  return gpt2::run_tool_main("gpt2-convert", [&] {
    bool help = false;
    const gpt2::ConvertOptions opts = gpt2::parse_command_line(argc, argv, &help);
    if (help) {
      std::printf("%s", gpt2::make_options().help().c_str());
      return 0;
    }
    gpt2::run(opts);
    return 0;
  });
}
