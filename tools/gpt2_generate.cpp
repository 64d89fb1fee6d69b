// gpt2-generate: continues a prompt with a trained GPT-2 (an llm.c model file), streaming the
// text to stdout as it is produced.
//
//   gpt2-generate --model MODEL.bin [--prompt TEXT | --prompt-file PATH] [--max-new-tokens N]
//                 [--temperature X] [--top-k K] [--top-p P] [--greedy] [--seed S]
//                 [--num-samples B] [--device auto|cuda|cpu] [--precision fp32|bf16]
//                 [--ignore-eos] [--warmup W] [--repeats R]
//
// The prompt is encoded with the GPT-2 tokenizer (no <|endoftext|> is added in front); without
// --prompt / --prompt-file the text starts from <|endoftext|> alone. The B samples are decoded
// together through the model's generation session (inference/generation.h): sample i draws from
// Rng(--seed) jumped i times, so sample 0 is what --num-samples 1 gives with that seed. A
// sample ends at the <|endoftext|> it produced (not printed) or after --max-new-tokens tokens.
// stdout holds only the generated text: with one sample, streamed token by token (a UTF-8
// character split across tokens is written when complete); with several, each sample whole
// under a "=== sample i ===" line as soon as it ends. stderr gets the model and settings first
// and the prefill and decode speeds at the end.
// Benchmarking: --ignore-eos decodes exactly --max-new-tokens tokens (an <|endoftext|> is
// printed as text and decoding goes on); --warmup W runs the whole generation W times first,
// untimed and silent; --repeats R times R runs (fresh random streams each, so every run draws
// the same tokens; only the first prints) and reports the median prefill time, decode time and
// end-to-end time (generate() from the prefill to the last token, sampling included), then one
// "gpt2-generate: timing ..." line of key=value pairs for scripts (bench/hf_generate_bench.py).
// There is no generation from presets (dN, gpt2, ...): their weights would be a random
// initialization, whose text is noise; --model must be a file.
// Exit codes: 0 success; 2 bad command line (unknown or malformed option, empty prompt, a
// prompt and --max-new-tokens beyond the model's context, a preset name as --model, bf16 on
// the CPU); 1 anything else (missing or corrupt model or prompt file, no usable GPU, memory).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "base/command_line.h"
#include "base/error.h"
#include "base/file_io.h"
#include "data/tokenizer.h"
#include "inference/generation.h"
#include "inference/model_argument.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/hf_checkpoint.h"
#include "model/model.h"

namespace gpt2 {
namespace {

struct GenerateOptions {
  std::string model;
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_file;
  int max_new_tokens = 128;
  SamplingOptions sampling;
  uint64_t seed = 1337;
  int num_samples = 1;
  std::string device = "auto";
  std::optional<Precision> precision;
  bool ignore_eos = false;
  int warmup = 0;
  int repeats = 1;
};

cxxopts::Options make_options() {
  cxxopts::Options options("gpt2-generate",
                           "Continue a prompt with a trained GPT-2 (an llm.c model file).");
  options.custom_help("--model MODEL.bin [--prompt TEXT | --prompt-file PATH] [options]");
  auto s = [] { return cxxopts::value<std::string>(); };
  options.add_options()
      ("model", "llm.c model file (a gpt2-train checkpoint, llm.c's gpt2_124M.bin, ...) or a Hugging Face directory (hf:DIR, or a directory holding config.json)", s())
      ("prompt", "text to continue (default: start from <|endoftext|>)", s())
      ("prompt-file", "read the text to continue from this file", s())
      ("max-new-tokens", "tokens to generate per sample", s()->default_value("128"))
      ("temperature", "softmax temperature; 0 means --greedy", s()->default_value("1.0"))
      ("top-k", "sample from the K most likely tokens only (0: all)", s()->default_value("0"))
      ("top-p", "sample from the smallest set of most likely tokens whose probability reaches P, "
       "in (0, 1] (1: all)", s()->default_value("1.0"))
      ("greedy", "always take the most likely token (no sampling)")
      ("seed", "seed of the samples' random streams", s()->default_value("1337"))
      ("num-samples", "samples decoded together as one batch", s()->default_value("1"))
      ("device", "auto | cuda | cpu", s()->default_value("auto"))
      ("precision", "fp32 | bf16 (default: bf16 on cuda, fp32 on cpu)", s())
      ("ignore-eos", "do not stop at <|endoftext|>: always decode --max-new-tokens tokens")
      ("warmup", "untimed, silent runs of the whole generation before the timed ones",
       s()->default_value("0"))
      ("repeats", "timed runs; the median of each time is reported", s()->default_value("1"))
      ("h,help", "print this help");
  return options;
}

/// Throws gpt2::UsageError. Returns std::nullopt for --help.
std::optional<GenerateOptions> parse_generate_command_line(int argc, char** argv) {
  cxxopts::Options options = make_options();
  options.allow_unrecognised_options();
  const cxxopts::ParseResult result = parse_tool_options(options, argc, argv);
  for (const std::string& extra : result.unmatched()) {
    if (!extra.empty() && extra[0] == '-') GPT2_USAGE_FAIL("unknown option '", extra, "'");
    GPT2_USAGE_FAIL("unexpected argument '", extra,
                    "' (options take the form --name value; quote a prompt with spaces)");
  }
  if (result.count("help")) return std::nullopt;
  auto text = [&](const char* name) { return result[name].as<std::string>(); };
  auto given = [&](const char* name) { return result.count(name) > 0; };

  GenerateOptions opts;
  if (!given("model"))
    GPT2_USAGE_FAIL("--model is required: an llm.c model file (generating from a random "
                    "initialization would only give noise)");
  opts.model = text("model");
  if (opts.model.empty()) GPT2_USAGE_FAIL("--model is empty");
  if (given("prompt") && given("prompt-file"))
    GPT2_USAGE_FAIL("give --prompt or --prompt-file, not both");
  if (given("prompt")) {
    opts.prompt = text("prompt");
    if (opts.prompt->empty())
      GPT2_USAGE_FAIL("--prompt is empty (leave it out to start from <|endoftext|>)");
  }
  if (given("prompt-file")) {
    opts.prompt_file = text("prompt-file");
    if (opts.prompt_file->empty()) GPT2_USAGE_FAIL("--prompt-file is empty");
  }
  opts.max_new_tokens = parse_positive_int("max-new-tokens", text("max-new-tokens"));
  constexpr double kMaxFloat = std::numeric_limits<float>::max();
  const float temperature =
      parse_float("temperature", text("temperature"), 0.0, kMaxFloat, "a non-negative number");
  opts.sampling.greedy = given("greedy") || temperature == 0.0f;
  opts.sampling.temperature = temperature > 0.0f ? temperature : 1.0f;
  opts.sampling.top_k = parse_count("top-k", text("top-k"));
  opts.sampling.top_p = parse_float("top-p", text("top-p"), 0.0, 1.0, "a number in (0, 1]");
  if (opts.sampling.top_p <= 0.0f)
    GPT2_USAGE_FAIL("--top-p must be a number in (0, 1] (got '", text("top-p"), "')");
  opts.seed = static_cast<uint64_t>(parse_integer("seed", text("seed"), 0,
                                                  std::numeric_limits<int64_t>::max(),
                                                  "a non-negative integer"));
  opts.num_samples = parse_positive_int("num-samples", text("num-samples"));
  opts.device = text("device");
  if (opts.device != "auto" && opts.device != "cuda" && opts.device != "cpu")
    GPT2_USAGE_FAIL("--device must be auto, cuda or cpu (got '", opts.device, "')");
  if (given("precision")) opts.precision = parse_precision(text("precision"));
  opts.ignore_eos = given("ignore-eos");
  opts.warmup = parse_count("warmup", text("warmup"));
  opts.repeats = parse_positive_int("repeats", text("repeats"));
  return opts;
}

/// The one place a --model value becomes a configuration and fp32 parameters: an llm.c model
/// file (version 3 fp32 or 5 bf16) or a Hugging Face directory, named as gpt2-train names them
/// (resolve_model_argument: a preset that is also such a directory here is ambiguous).
ModelCheckpoint load_model_weights(const std::string& spec) {
  const ModelArgument model = resolve_model_argument(spec);
  if (model.source == ModelSource::kHfDirectory) {
    HfModel hf = read_hf_model(model.path);
    ModelCheckpoint weights;
    weights.config = hf.config;
    weights.params = std::move(hf.params);
    return weights;
  }
  if (model.source == ModelSource::kLlmcFile) return read_model_checkpoint(model.path);
  if (is_model_preset(spec))
    GPT2_USAGE_FAIL("--model ", spec, " is a preset name, which has no trained weights (text "
                    "from a random initialization is noise): give an llm.c model file, e.g. "
                    "a gpt2-train checkpoint out/model_00000050.bin");
  GPT2_FAIL("--model ", spec, ": no such file");
}

std::vector<int> prompt_tokens(const GenerateOptions& opts, Gpt2Tokenizer& tokenizer) {
  if (!opts.prompt && !opts.prompt_file) return {Gpt2Tokenizer::kEndOfText};
  // A prompt must fit the model's context (a few hundred KB of text at most): a file beyond
  // this is a mistake.
  constexpr size_t kMaxPromptFileBytes = size_t{64} << 20;
  const std::string text =
      opts.prompt ? *opts.prompt : read_file_text(*opts.prompt_file, kMaxPromptFileBytes);
  if (text.empty()) GPT2_FAIL("--prompt-file ", *opts.prompt_file, " is empty");
  return tokenizer.encode(text);
}

std::string format_rate(int64_t tokens, double seconds) {
  if (seconds <= 0.0) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f tokens/s", static_cast<double>(tokens) / seconds);
  return buf;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

void write_out(const std::string& bytes) {
  if (bytes.empty()) return;
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  std::fflush(stdout);
}

// stderr's last lines: the prefill and decode speeds (medians over the timed runs), in words
// and as the key=value "timing" line that scripts read.
void report_speeds(const GenerateOptions& opts, const GenerationStats& stats, double end_to_end) {
  const int64_t prefill_tokens = static_cast<int64_t>(stats.prompt_tokens) * stats.sequences;
  const int64_t decode_tokens = stats.decode_steps * stats.sequences;
  const std::string runs =
      opts.repeats == 1 && opts.warmup == 0
          ? std::string()
          : str_cat(" (median of ", opts.repeats, " run", opts.repeats == 1 ? "" : "s", " after ",
                    opts.warmup, " warm-up run", opts.warmup == 1 ? "" : "s", ")");
  std::fprintf(stderr,
               "gpt2-generate: prefill %lld tokens (%d x %d) in %.3f s: %s; decode %lld steps x "
               "%d in %.3f s: %s; %lld tokens generated; end to end %.3f s%s\n",
               static_cast<long long>(prefill_tokens), stats.prompt_tokens, stats.sequences,
               stats.prefill_seconds, format_rate(prefill_tokens, stats.prefill_seconds).c_str(),
               static_cast<long long>(stats.decode_steps), stats.sequences, stats.decode_seconds,
               format_rate(decode_tokens, stats.decode_seconds).c_str(),
               static_cast<long long>(stats.generated_tokens), end_to_end, runs.c_str());
  std::fprintf(stderr,
               "gpt2-generate: timing prefill_tokens=%lld prefill_s=%.6f decode_steps=%lld "
               "decode_tokens=%lld decode_s=%.6f decode_tokens_per_s=%.3f generated_tokens=%lld "
               "end_to_end_s=%.6f warmup=%d repeats=%d\n",
               static_cast<long long>(prefill_tokens), stats.prefill_seconds,
               static_cast<long long>(stats.decode_steps), static_cast<long long>(decode_tokens),
               stats.decode_seconds,
               stats.decode_seconds > 0 ? static_cast<double>(decode_tokens) / stats.decode_seconds
                                        : 0.0,
               static_cast<long long>(stats.generated_tokens), end_to_end, opts.warmup,
               opts.repeats);
}

int run(const GenerateOptions& opts) {
  // The device first: a bad combination is a usage error before anything is read.
  DeviceKind device = DeviceKind::kCpu;
  if (opts.device == "cuda") {
    const DeviceAvailability devices = probe_devices();
    if (!devices.cuda) GPT2_FAIL("--device cuda: no usable CUDA device: ", devices.why_not);
    device = DeviceKind::kCuda;
  } else if (opts.device == "auto") {
    device = probe_devices().cuda ? DeviceKind::kCuda : DeviceKind::kCpu;
  }
  const bool on_cuda = device == DeviceKind::kCuda;
  const Precision precision =
      opts.precision.value_or(on_cuda ? Precision::kBf16 : Precision::kFp32);
  if (!on_cuda && precision == Precision::kBf16)
    GPT2_USAGE_FAIL("--precision bf16 needs --device cuda (the CPU backend is fp32 only)");

  ModelCheckpoint weights = load_model_weights(opts.model);
  const ModelConfig& config = weights.config;
  Gpt2Tokenizer tokenizer = Gpt2Tokenizer::from_default_files();
  if (config.vocab_size != tokenizer.vocab_size())
    GPT2_FAIL("--model ", opts.model, " has a vocabulary of ", config.vocab_size,
              " tokens; the GPT-2 tokenizer has ", tokenizer.vocab_size());
  const std::vector<int> prompt = prompt_tokens(opts, tokenizer);
  if (prompt.empty()) GPT2_USAGE_FAIL("the prompt encodes to no tokens");
  const int64_t P = static_cast<int64_t>(prompt.size());
  const int64_t maxT = config.max_seq_len;
  if (P > maxT)
    GPT2_USAGE_FAIL("the prompt is ", P, " tokens, longer than the model's context of ", maxT,
                    " tokens");
  // The last new token is never fed back: P + N - 1 positions.
  if (P + opts.max_new_tokens - 1 > maxT)
    GPT2_USAGE_FAIL("--max-new-tokens ", opts.max_new_tokens, " after a prompt of ", P,
                    " tokens needs ", P + opts.max_new_tokens - 1,
                    " positions; the model's context is ", maxT, " (at most ", maxT - P + 1,
                    " new tokens fit)");

  ModelOptions model_options;
  model_options.config = config;
  model_options.batch_size = opts.num_samples;
  model_options.seq_len = static_cast<int>(P + opts.max_new_tokens - 1);
  model_options.precision = precision;
  model_options.training = false;  // no gradients, AdamW moments or backward workspace
  std::unique_ptr<Model> model =
      on_cuda ? make_cuda_model(model_options) : make_cpu_model(model_options);
  model->set_parameters(weights.params.data());
  std::vector<float>().swap(weights.params);  // the model holds its own copy

  const SamplingOptions& s = opts.sampling;
  std::fprintf(stderr,
               "gpt2-generate: %s (%s) on %s, %s; prompt %lld tokens; %d sample%s of up to %d "
               "tokens, %s, seed %llu\n",
               opts.model.c_str(), config.describe().c_str(), model->device_name().c_str(),
               to_string(precision), static_cast<long long>(P), opts.num_samples,
               opts.num_samples == 1 ? "" : "s", opts.max_new_tokens,
               s.greedy ? "greedy"
                        : str_cat("temperature ", s.temperature, ", top-k ", s.top_k, ", top-p ",
                                  s.top_p).c_str(),
               static_cast<unsigned long long>(opts.seed));

  GenerationOptions options;
  options.max_new_tokens = opts.max_new_tokens;
  options.sampling = opts.sampling;
  options.stop_at_end_of_text = !opts.ignore_eos;
  const int B = opts.num_samples;
  std::vector<Utf8Stream> streams(static_cast<size_t>(B));
  std::vector<std::string> texts(static_cast<size_t>(B));
  std::vector<int> counts(static_cast<size_t>(B), 0);
  auto on_token = [&](int b, int token) {
    const bool end = !opts.ignore_eos && token == Gpt2Tokenizer::kEndOfText;
    const bool last = end || ++counts[b] == opts.max_new_tokens;
    std::string bytes = end ? "" : streams[b].push(tokenizer.decode_token(token));
    if (last) bytes += streams[b].finish();
    if (B == 1) {
      write_out(last ? bytes + "\n" : bytes);
      return;
    }
    texts[b] += bytes;
    if (last) write_out(str_cat("=== sample ", b, " ===\n", texts[b], "\n"));
  };
  // Warm-up runs, then the timed ones; each run starts from fresh random streams, so all draw
  // the same tokens, and only the first timed run prints them.
  GenerationStats stats;
  std::vector<double> prefill_seconds, decode_seconds, end_to_end_seconds;
  for (int run = 0; run < opts.warmup + opts.repeats; ++run) {
    const bool timed = run >= opts.warmup;
    const bool prints = run == opts.warmup;
    std::vector<Rng> rngs = sequence_rngs(opts.seed, opts.num_samples);
    GenerationStats run_stats;
    const auto start = std::chrono::steady_clock::now();
    generate(*model, prompt, options, rngs, prints ? TokenCallback(on_token) : TokenCallback(),
             &run_stats);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!timed) continue;
    if (prints) stats = run_stats;
    prefill_seconds.push_back(run_stats.prefill_seconds);
    decode_seconds.push_back(run_stats.decode_seconds);
    end_to_end_seconds.push_back(seconds);
  }
  stats.prefill_seconds = median(prefill_seconds);
  stats.decode_seconds = median(decode_seconds);
  const double end_to_end = median(end_to_end_seconds);

  report_speeds(opts, stats, end_to_end);
  return 0;
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  return gpt2::run_tool_main("gpt2-generate", [&] {
    const std::optional<gpt2::GenerateOptions> opts = gpt2::parse_generate_command_line(argc, argv);
    if (!opts) {
      std::printf("%s", gpt2::make_options().help().c_str());
      return 0;
    }
    return gpt2::run(*opts);
  });
}
