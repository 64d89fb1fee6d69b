/**
 * @file sweep.cpp
 * @brief gpt2-sweep: naive vs flash attention, end to end, across context lengths.
 *
 * For every T in --seq-lens and every --attn kind, runs gpt2-train in its own process (own CUDA
 * context, own memory high-water mark) for --steps steps of d12 (default) at batch size
 * B = max(1, --tokens-per-step / T), so tokens per step are constant until B reaches 1. From the
 * run's metrics.jsonl it takes the median step time over the steps after the first
 * --warmup-steps and reports tokens/s = B*T / median step time, next to the measured peak device
 * memory from summary.json. A run refused for memory ("out of GPU memory", or on the CPU "not
 * enough CPU memory") is marked OOM with the bytes the plan needed: a sweep is expected to reach
 * the device's limit. Any other failure is marked FAILED (its log is kept).
 * Writes OUT/sweep.csv, OUT/sweep.md (table with device and date) and OUT/sweep.svg (tokens/s
 * and peak memory vs T, one series per attention kind; base/svg_plot.h, with a message instead
 * of axes when no point succeeded), and prints the table.
 * --precision defaults to bf16 on --device cuda and fp32 on --device cpu (the CPU backend
 * computes fp32 only; bf16 or fp8 there is a usage error).
 * Exit code: 0 when every point ran or was OOM; 1 when any point FAILED (after writing the
 * table and the plot), or on an error of the sweep itself; 2 for a bad command line.
 * --context-parallel N (N > 1): every point is one job of N ranks sharing each sequence
 * (gpt2-train --context-parallel N, flash attention only), started by --launcher (default
 * "mpirun -np N"); tokens/s are the job's, peak memory the largest rank's. On cuda T must be at
 * least 256 N (the GPU's chunks of 128 positions).
 * --replot re-renders a sweep.csv and exits 0 whatever its rows say. Never asserts.
 */
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "base/command_line.h"
#include "base/json.h"
#include "base/file_io.h"
#include "base/error.h"
#include "base/svg_plot.h"
#include "model/config.h"
#include "model/memory_plan.h"

namespace gpt2 {
namespace {

struct SweepOptions {
  std::string train_binary;
  std::string model = "d12";
  std::vector<int> seq_lens;
  std::vector<std::string> attns;
  int tokens_per_step = 16384;
  int steps = 8;
  int warmup_steps = 3;
  std::string precision;  // bf16 on cuda, fp32 on cpu unless given
  std::string device = "cuda";
  std::string out_dir = "out/sweep";
  std::string extra_args;
  int context_parallel = 1;  // ranks sharing each sequence
  std::string launcher;      // prefix of every gpt2-train command (context parallel)
};

struct RunResult {
  int seq_len = 0;
  int batch_size = 0;
  std::string attn;
  std::string status;  // "ok", "OOM", "FAILED"
  double tokens_per_s = 0;
  double median_step_ms = 0;
  double peak_mem_bytes = 0;
  double planned_mem_bytes = 0;
  double mfu = 0;
  double final_loss = 0;
  std::string device_name;
  std::string log_path;
};

std::string self_dir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

// A number of a JSON object (summary.json, a metrics line); 0 when absent or null (as the CPU
// summary's missing "mfu", a non-finite loss).
double json_number(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

RunResult run_one(const SweepOptions& o, int T, const std::string& attn) {
  RunResult r;
  r.seq_len = T;
  r.batch_size = std::max(1, o.tokens_per_step / T);
  r.attn = attn;
  const std::string run_dir = str_cat(o.out_dir, "/", attn, "_T", T);
  r.log_path = run_dir + ".log";
  const std::string group =
      o.context_parallel > 1 ? str_cat(" --context-parallel ", o.context_parallel) : "";
  const std::string command = str_cat(
      o.launcher.empty() ? "" : o.launcher + " ", shell_quote(o.train_binary), group,
      " --device ", o.device, " --model ", shell_quote(o.model),
      " --max-seq-len ", T, " --seq-len ", T, " --batch-size ", r.batch_size,
      " --total-batch-size ", static_cast<long long>(r.batch_size) * T, " --steps ", o.steps,
      " --attn ", attn, " --precision ", o.precision,
      " --val-every 0 --sample-every 0 --checkpoint-every 0 --out ", shell_quote(run_dir), " ",
      o.extra_args, " > ", shell_quote(r.log_path), " 2>&1");
  std::printf("  running %-5s T=%-6d B=%-3d ... ", attn.c_str(), T, r.batch_size);
  std::fflush(stdout);
  const int raw = std::system(command.c_str());
  const int code = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  const std::string log = file_exists(r.log_path) ? read_file_text(r.log_path) : "";
  if (code != 0) {
    const bool out_of_memory = log.find("out of GPU memory") != std::string::npos ||
                               log.find("not enough CPU memory") != std::string::npos;
    r.status = out_of_memory ? "OOM" : "FAILED";
    // The plan total is in the trainer's refusal: "the plan needs N bytes" (GPU), "the model
    // needs N bytes" (CPU).
    for (const std::string needs : {"the plan needs ", "the model needs "}) {
      const size_t at = log.find(needs);
      if (out_of_memory && at != std::string::npos && r.planned_mem_bytes == 0)
        r.planned_mem_bytes = std::strtod(log.c_str() + at + needs.size(), nullptr);
    }
    std::printf("%s (exit %d, log %s)\n", r.status.c_str(), code, r.log_path.c_str());
    return r;
  }
  const std::string summary_file = run_dir + "/summary.json";
  const Json summary = parse_json(read_file_text(summary_file), summary_file);
  r.peak_mem_bytes = json_number(summary, "peak_mem_bytes");
  r.planned_mem_bytes = json_number(summary, "planned_mem_bytes");
  r.final_loss = json_number(summary, "final_train_loss");
  r.device_name = summary.value("device_name", "");
  std::vector<double> step_ms;
  const std::string metrics_file = run_dir + "/metrics.jsonl";
  std::istringstream lines(read_file_text(metrics_file));
  std::string line;
  while (std::getline(lines, line)) {
    const Json row = parse_json(line, metrics_file);
    if (json_number(row, "step") > o.warmup_steps) step_ms.push_back(json_number(row, "ms"));
  }
  if (step_ms.empty()) {
    r.status = "FAILED";
    std::printf("FAILED (no timed steps in metrics.jsonl)\n");
    return r;
  }
  std::sort(step_ms.begin(), step_ms.end());
  const size_t n = step_ms.size();
  r.median_step_ms = n % 2 ? step_ms[n / 2] : 0.5 * (step_ms[n / 2 - 1] + step_ms[n / 2]);
  r.tokens_per_s = static_cast<double>(r.batch_size) * T / (r.median_step_ms / 1000.0);
  // MFU of the tokens/s reported here (the median step), not of the trainer's mean: its FLOPs
  // per token over the device's peak (absent where the trainer knows no peak for the device).
  if (summary.contains("peak_flops"))
    r.mfu = r.tokens_per_s * json_number(summary, "flops_per_token") /
            json_number(summary, "peak_flops");
  r.status = "ok";
  std::printf("%.0f tokens/s, peak %s\n", r.tokens_per_s,
              format_bytes(static_cast<size_t>(r.peak_mem_bytes)).c_str());
  return r;
}

std::string cell(const RunResult* r, bool memory) {
  if (r == nullptr) return "-";
  if (r->status == "OOM") {  // tokens column: OOM; memory column: what the plan needed
    if (!memory || r->planned_mem_bytes <= 0) return "OOM";
    return str_cat("plan needs ", format_bytes(static_cast<size_t>(r->planned_mem_bytes)));
  }
  if (r->status != "ok") return r->status;
  char buf[64];
  if (memory) return format_bytes(static_cast<size_t>(r->peak_mem_bytes));
  std::snprintf(buf, sizeof buf, "%.0f", r->tokens_per_s);
  return buf;
}

// The figure (base/svg_plot.h): two panels, tokens/s and peak memory against log2 T, one series
// per attention kind, "OOM" where a point ran out of memory.
std::string svg_plot(const SweepOptions& o, const std::vector<RunResult>& results,
                     const std::string& title) {
  static const char* const kColors[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd"};
  PlotFigure figure;
  figure.title = title;
  for (int panel_index = 0; panel_index < 2; ++panel_index) {
    const bool memory = panel_index == 1;
    PlotPanel panel;
    panel.title = memory ? "peak memory (GiB)" : "tokens / s";
    panel.x_label = "sequence length T";
    panel.x_log2 = true;
    for (int T : o.seq_lens)
      panel.x_ticks.push_back({static_cast<double>(T), T >= 1024 && T % 1024 == 0
                                                           ? str_cat(T / 1024, "K")
                                                           : str_cat(T)});
    panel.empty_message = "no point of the sweep succeeded: see sweep.md and the logs";
    for (size_t a = 0; a < o.attns.size(); ++a) {
      PlotSeries series;
      series.name = o.attns[a];
      series.color = kColors[a % (sizeof kColors / sizeof kColors[0])];
      for (const RunResult& r : results) {
        if (r.attn != o.attns[a]) continue;
        if (r.status == "ok")
          series.points.push_back(
              {static_cast<double>(r.seq_len),
               memory ? r.peak_mem_bytes / 1073741824.0 : r.tokens_per_s});
        if (r.status == "OOM") panel.notes.push_back({static_cast<double>(r.seq_len), "OOM", a});
      }
      panel.series.push_back(std::move(series));
    }
    figure.panels.push_back(std::move(panel));
  }
  return render_svg(figure);
}

std::string today() {
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

// Rows of a sweep.csv written by this program (columns found by name; device and date
// columns are optional: older files lack them).
std::vector<RunResult> read_results_csv(const std::string& path, std::string* device,
                                        std::string* date) {
  std::istringstream lines(read_file_text(path));
  std::string line;
  if (!std::getline(lines, line)) GPT2_FAIL(path, ": empty CSV");
  const std::vector<std::string> header = split(line, ',');
  auto column = [&](const std::string& name) -> int {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return static_cast<int>(i);
    return -1;
  };
  for (const char* required : {"seq_len", "batch_size", "attn", "status", "tokens_per_s",
                               "peak_mem_bytes", "planned_mem_bytes"})
    if (column(required) < 0) GPT2_FAIL(path, ": no column '", required, "'");
  std::vector<RunResult> results;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream fields(line);
    std::string field;
    while (std::getline(fields, field, ',')) f.push_back(field);
    if (f.size() < header.size()) GPT2_FAIL(path, ": short row '", line, "'");
    auto number = [&](const char* name) {
      const int c = column(name);
      return c < 0 || f[c].empty() ? 0.0 : std::stod(f[c]);
    };
    RunResult r;
    r.seq_len = static_cast<int>(number("seq_len"));
    r.batch_size = static_cast<int>(number("batch_size"));
    r.attn = f[column("attn")];
    r.status = f[column("status")];
    r.tokens_per_s = number("tokens_per_s");
    r.median_step_ms = number("median_step_ms");
    r.peak_mem_bytes = number("peak_mem_bytes");
    r.planned_mem_bytes = number("planned_mem_bytes");
    r.mfu = number("mfu");
    r.final_loss = number("final_train_loss");
    if (column("device") >= 0 && device->empty()) *device = f[column("device")];
    if (column("date") >= 0 && date->empty()) *date = f[column("date")];
    results.push_back(r);
  }
  return results;
}

/// gpt2-sweep's command line.
cxxopts::Options sweep_command_line() {
  cxxopts::Options cli("gpt2-sweep",
                       "Train a model briefly at several context lengths with naive and flash "
                       "attention; report tokens/s (median step, warm-up excluded), measured "
                       "peak memory and the speedup; write CSV, Markdown and an SVG plot.");
  cli.add_options()
      ("model", "model preset", cxxopts::value<std::string>()->default_value("d12"))
      ("seq-lens", "comma-separated context lengths",
       cxxopts::value<std::string>()->default_value("1024,2048,4096,8192,16384,32768,65536"))
      ("attn", "comma-separated attention kinds", cxxopts::value<std::string>()->default_value("naive,flash"))
      ("tokens-per-step", "B = max(1, tokens-per-step / T)", cxxopts::value<int>()->default_value("16384"))
      ("steps", "steps per run", cxxopts::value<int>()->default_value("8"))
      ("warmup-steps", "leading steps left out of the timing", cxxopts::value<int>()->default_value("3"))
      ("precision", "bf16, fp8 or fp32 (default: bf16 on cuda, fp32 on cpu)",
       cxxopts::value<std::string>())
      ("device", "cuda (or cpu, for a smoke test)", cxxopts::value<std::string>()->default_value("cuda"))
      ("out", "output directory", cxxopts::value<std::string>()->default_value("out/sweep"))
      ("train-binary", "gpt2-train to run (default: next to this program)", cxxopts::value<std::string>())
      ("extra", "more arguments for gpt2-train", cxxopts::value<std::string>()->default_value(""))
      ("context-parallel", "N > 1: each point a job of N ranks sharing each sequence (flash)",
       cxxopts::value<int>()->default_value("1"))
      ("launcher", "command that starts a context-parallel job's ranks (default: mpirun -np N)",
       cxxopts::value<std::string>())
      ("replot", "re-render table and plot from a sweep.csv instead of running",
       cxxopts::value<std::string>())
      ("device-name", "with --replot: device for the heading when the CSV has none",
       cxxopts::value<std::string>()->default_value(""))
      ("date", "with --replot: date for the heading when the CSV has none",
       cxxopts::value<std::string>()->default_value(""))
      ("h,help", "print this help");
  return cli;
}

/// The sweep's options from its command line; throws UsageError for a bad one.
SweepOptions resolve_sweep_options(const cxxopts::ParseResult& args) {
  SweepOptions o;
  o.model = args["model"].as<std::string>();
  for (const std::string& t : split(args["seq-lens"].as<std::string>(), ',')) {
    int value = 0;
    try {
      value = std::stoi(t);
    } catch (const std::exception&) {
      GPT2_USAGE_FAIL("--seq-lens: '", t, "' is not a number");
    }
    if (value < 1) GPT2_USAGE_FAIL("--seq-lens: ", value, " must be >= 1");
    o.seq_lens.push_back(value);
  }
  o.attns = split(args["attn"].as<std::string>(), ',');
  for (const std::string& a : o.attns)
    if (a != "naive" && a != "flash") GPT2_USAGE_FAIL("--attn: '", a, "' is not naive or flash");
  o.tokens_per_step = args["tokens-per-step"].as<int>();
  o.steps = args["steps"].as<int>();
  o.warmup_steps = args["warmup-steps"].as<int>();
  if (o.seq_lens.empty() || o.attns.empty()) GPT2_USAGE_FAIL("nothing to sweep");
  if (o.tokens_per_step < 1) GPT2_USAGE_FAIL("--tokens-per-step must be >= 1");
  if (o.warmup_steps < 0 || o.steps <= o.warmup_steps)
    GPT2_USAGE_FAIL("--steps (", o.steps, ") must exceed --warmup-steps (", o.warmup_steps, ")");
  if (!is_model_preset(o.model)) GPT2_USAGE_FAIL("--model: unknown preset '", o.model, "'");
  o.device = args["device"].as<std::string>();
  if (o.device != "cuda" && o.device != "cpu")
    GPT2_USAGE_FAIL("--device: '", o.device, "' is not cuda or cpu");
  o.precision = args.count("precision") ? args["precision"].as<std::string>()
                : o.device == "cpu"      ? "fp32"
                                         : "bf16";
  if (o.precision != "bf16" && o.precision != "fp8" && o.precision != "fp32")
    GPT2_USAGE_FAIL("--precision: '", o.precision, "' is not bf16, fp8 or fp32");
  if (o.device == "cpu" && o.precision != "fp32")
    GPT2_USAGE_FAIL("--precision ", o.precision, " needs --device cuda (the CPU backend computes "
                    "fp32 only)");
  o.out_dir = args["out"].as<std::string>();
  o.extra_args = args["extra"].as<std::string>();
  o.context_parallel = args["context-parallel"].as<int>();
  if (o.context_parallel < 1)
    GPT2_USAGE_FAIL("--context-parallel must be >= 1 (got ", o.context_parallel, ")");
  if (o.context_parallel > 1) {
    if (!args.count("attn")) o.attns = {"flash"};
    if (std::find(o.attns.begin(), o.attns.end(), "naive") != o.attns.end())
      GPT2_USAGE_FAIL("--context-parallel needs --attn flash (naive attention holds each "
                      "sequence's T x T scores, which no rank of a group does)");
    const int shortest = 2 * o.context_parallel * (o.device == "cuda" ? 128 : 1);
    for (int T : o.seq_lens)
      if (T < shortest)
        GPT2_USAGE_FAIL("--seq-lens: ", T, " is shorter than --context-parallel ",
                        o.context_parallel, " allows on ", o.device, " (at least ", shortest, ")");
    o.launcher = args.count("launcher") ? args["launcher"].as<std::string>()
                                        : str_cat("mpirun -np ", o.context_parallel);
  } else if (args.count("launcher")) {
    GPT2_USAGE_FAIL("--launcher starts the ranks of --context-parallel N > 1");
  }
  return o;
}

/// The points' results: run now, or read back from a sweep.csv (--replot, which also gives the
/// points' lengths and kinds); *device and *date as the results name them.
std::vector<RunResult> sweep_results(const cxxopts::ParseResult& args, SweepOptions& o,
                                     std::string* device, std::string* date) {
  std::vector<RunResult> results;
  *device = args["device-name"].as<std::string>();
  *date = args["date"].as<std::string>();
  if (args.count("replot")) {
    results = read_results_csv(args["replot"].as<std::string>(), device, date);
    o.seq_lens.clear();
    o.attns.clear();
    for (const RunResult& r : results) {
      if (std::find(o.seq_lens.begin(), o.seq_lens.end(), r.seq_len) == o.seq_lens.end())
        o.seq_lens.push_back(r.seq_len);
      if (std::find(o.attns.begin(), o.attns.end(), r.attn) == o.attns.end())
        o.attns.push_back(r.attn);
    }
  } else {
    o.train_binary = args.count("train-binary") ? args["train-binary"].as<std::string>()
                                                : self_dir() + "/gpt2-train";
    if (!file_exists(o.train_binary)) GPT2_FAIL(o.train_binary, ": gpt2-train not found");
    std::printf("gpt2-sweep: %s, %s, %d steps per run (first %d untimed), %d tokens per step\n",
                o.model.c_str(), o.precision.c_str(), o.steps, o.warmup_steps, o.tokens_per_step);
    for (int T : o.seq_lens)
      for (const std::string& attn : o.attns) results.push_back(run_one(o, T, attn));
    for (const RunResult& r : results)
      if (!r.device_name.empty()) *device = r.device_name;
    *date = today();
  }
  return results;
}

/// OUT/sweep.csv, sweep.md (printed too) and sweep.svg of the results.
void write_sweep_outputs(const SweepOptions& o, const std::vector<RunResult>& results,
                         const std::string& device, const std::string& date) {
  auto find = [&](int T, const std::string& attn) -> const RunResult* {
    for (const RunResult& r : results)
      if (r.seq_len == T && r.attn == attn) return &r;
    return nullptr;
  };
  std::ostringstream csv;
  csv << "seq_len,batch_size,attn,status,tokens_per_s,median_step_ms,peak_mem_bytes,"
         "planned_mem_bytes,mfu,final_train_loss,device,date\n";
  for (const RunResult& r : results)
    csv << r.seq_len << ',' << r.batch_size << ',' << r.attn << ',' << r.status << ','
        << r.tokens_per_s << ',' << r.median_step_ms << ',' << std::llround(r.peak_mem_bytes) << ','
        << std::llround(r.planned_mem_bytes) << ',' << r.mfu << ',' << r.final_loss << ','
        << device << ',' << date << '\n';
  write_text_file(o.out_dir + "/sweep.csv", csv.str());

  const std::string group =
      o.context_parallel > 1
          ? str_cat(" x", o.context_parallel, " (a group sharing each sequence; memory per GPU)")
          : "";
  const std::string heading =
      str_cat(o.model, " ", o.precision, ", ", device, group, ", ", date, ": median of ",
              o.steps - o.warmup_steps, " timed steps after ", o.warmup_steps, " warm-up steps");
  std::ostringstream md;
  md << heading << "\n\n| T | B | naive tokens/s | naive peak memory | flash tokens/s | "
                   "flash peak memory | flash / naive |\n|---|---|---|---|---|---|---|\n";
  for (int T : o.seq_lens) {
    const RunResult* naive = find(T, "naive");
    const RunResult* flash = find(T, "flash");
    std::string speedup = "-";
    if (naive && flash && naive->status == "ok" && flash->status == "ok") {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2fx", flash->tokens_per_s / naive->tokens_per_s);
      speedup = buf;
    }
    md << "| " << T << " | " << std::max(1, o.tokens_per_step / T) << " | " << cell(naive, false)
       << " | " << cell(naive, true) << " | " << cell(flash, false) << " | " << cell(flash, true)
       << " | " << speedup << " |\n";
  }
  write_text_file(o.out_dir + "/sweep.md", md.str());
  write_text_file(o.out_dir + "/sweep.svg", svg_plot(o, results, heading));
  std::printf("\n%s\nwrote %s/sweep.csv, sweep.md, sweep.svg\n", md.str().c_str(),
              o.out_dir.c_str());
}

/// The exit code (see the file comment), after saying what did not succeed.
int sweep_outcome(const std::vector<RunResult>& results, bool replot) {
  int succeeded = 0, out_of_memory = 0;
  std::vector<std::string> failed_logs;
  for (const RunResult& r : results) {
    succeeded += r.status == "ok";
    out_of_memory += r.status == "OOM";
    if (r.status != "ok" && r.status != "OOM")
      failed_logs.push_back(r.log_path.empty() ? str_cat(r.attn, " T=", r.seq_len) : r.log_path);
  }
  if (succeeded == 0)
    std::printf("no point succeeded: sweep.svg says so instead of drawing empty axes\n");
  if (out_of_memory > 0)
    std::printf("%d point(s) ran out of memory (OOM: expected at the device's limit)\n",
                out_of_memory);
  if (replot || failed_logs.empty()) return 0;
  std::printf("%zu point(s) FAILED for a reason other than memory; their logs:\n",
              failed_logs.size());
  for (const std::string& log : failed_logs) std::printf("  %s\n", log.c_str());
  return 1;
}

int sweep_main(int argc, char** argv) {
  cxxopts::Options cli = sweep_command_line();
  const cxxopts::ParseResult args = parse_tool_options(cli, argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", cli.help().c_str());
    return 0;
  }
  SweepOptions o = resolve_sweep_options(args);
  make_directories(o.out_dir);
  std::string device, date;
  const std::vector<RunResult> results = sweep_results(args, o, &device, &date);
  if (device.empty()) device = "unknown device";
  if (date.empty()) date = today();
  write_sweep_outputs(o, results, device, date);
  return sweep_outcome(results, args.count("replot") > 0);
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  return gpt2::run_tool_main("gpt2-sweep", [&] { return gpt2::sweep_main(argc, argv); });
}
