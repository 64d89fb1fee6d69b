#include "train/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/error.h"
#include "base/json.h"
#include "model/memory_plan.h"
#include "model/parameters.h"

namespace gpt2 {

std::string to_json_line(const StepMetrics& m) {
  Json line;
  line["step"] = m.step;
  line["loss"] = json_float(m.loss);
  if (m.val_loss) line["val_loss"] = json_float(*m.val_loss);
  line["lr"] = json_float(m.lr);
  line["grad_norm"] = json_float(m.grad_norm);
  line["ms"] = m.ms;
  line["tokens_per_s"] = m.tokens_per_s;
  line["peak_mem_bytes"] = m.peak_mem_bytes;
  line["attn"] = m.attn;
  line["device"] = m.device;
  line["precision"] = m.precision;
  line["micro_batches"] = m.micro_batches;
  if (m.skipped) line["skipped"] = true;
  if (m.world_size > 1) line["world_size"] = m.world_size;
  if (m.comm_ms) line["comm_ms"] = *m.comm_ms;
  if (m.comm_exposed_ms) line["comm_exposed_ms"] = *m.comm_exposed_ms;
  if (m.fp8_saturated) line["fp8_saturated"] = *m.fp8_saturated;
  return dump_json(line);
}

MetricsFile::MetricsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0) GPT2_FAIL(path, ": cannot open for appending: ", std::strerror(errno));
}

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::append_line(const std::string& line, int step) {
  const off_t end = ::lseek(fd_, 0, SEEK_END);
  const std::string text = line + "\n";
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + written, text.size() - written);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : EIO;
    // Cut the partial line off: the file keeps exactly the lines of the steps before.
    const bool cut = end >= 0 && ::ftruncate(fd_, end) == 0;
    GPT2_FAIL(path_, ": cannot append the metrics of step ", step, " (", written, " of ",
              text.size(), " bytes written): ", std::strerror(err),
              cut ? "; the file keeps the lines of the steps before"
                  : "; the partial line could not be removed");
  }
}

std::string format_duration(double seconds) {
  const long total = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (total >= 3600) {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", total / 3600, (total % 3600) / 60);
  } else if (total >= 60) {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", total / 60, total % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lds", total);
  }
  return buf;
}

std::string format_step_line(const StepMetrics& m, int total_steps, double eta_seconds) {
  char comm[64] = "";
  if (m.comm_ms && m.comm_exposed_ms) {
    std::snprintf(comm, sizeof comm, " (comm %.1f ms, %.1f exposed)", *m.comm_ms,
                  *m.comm_exposed_ms);
  } else if (m.comm_ms) {
    std::snprintf(comm, sizeof comm, " (comm %.1f ms)", *m.comm_ms);
  }
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "step %*d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms%s | %.0f tok/s | peak %s%s",
                static_cast<int>(std::to_string(total_steps).size()), m.step, total_steps,
                printable(m.loss), m.lr, printable(m.grad_norm), m.ms, comm, m.tokens_per_s,
                format_bytes(m.peak_mem_bytes).c_str(), m.world_size > 1 ? " per rank" : "");
  std::string line = buf;
  if (eta_seconds >= 0.0) line += " | eta " + format_duration(eta_seconds);
  if (m.val_loss) {
    std::snprintf(buf, sizeof buf, " | val loss %.6f", printable(*m.val_loss));
    line += buf;
  }
  if (m.skipped) line += " | update skipped (non-finite)";
  return line;
}

double training_flops_per_token(const ModelConfig& config, int seq_len) {
  // MFU's model FLOPs, as in the PaLM paper and llm.c:
  //   flops_per_token = 6 * (num_params - maxT*C) + 6 * L * T * C
  // Every parameter except the position embedding (a lookup, not a matmul) takes part in one
  // multiply-add per token forward and two backward: 6 FLOPs per parameter, the classifier
  // tied to wte included. Causal attention adds QK^T and PV, each 2*C FLOPs per key per layer
  // forward, with T/2 keys on average: 2 * 2C * T/2 = 2*T*C per layer, times 3 for fwd+bwd.
  const double num_params = static_cast<double>(ParameterLayout::for_config(config).total);
  const double position_embedding = double(config.max_seq_len) * config.channels;
  return 6.0 * (num_params - position_embedding) +
         6.0 * config.num_layers * double(seq_len) * config.channels;
}

std::optional<double> peak_flops(const std::string& device_name, Precision precision) {
  struct Peak {
    const char* name;     // matched as a substring of the device name; the first match wins
    const char* variant;  // a second substring that must also match, or ""
    double bf16, fp32;    // dense FLOP/s by the datasheet (bf16 with fp32 accumulation)
  };
  static const Peak kPeaks[] = {
      {"H100", "PCIe", 756e12, 51e12}, {"H100", "NVL", 835e12, 60e12},
      {"H100", "", 989e12, 67e12},     {"H200", "", 989e12, 67e12},
      {"A100", "", 312e12, 19.5e12},   {"L40S", "", 362e12, 91.6e12},
  };
  for (const Peak& peak : kPeaks) {
    if (device_name.find(peak.name) == std::string::npos) continue;
    if (*peak.variant != '\0' && device_name.find(peak.variant) == std::string::npos) continue;
    // fp8 against bf16's peak: its GEMMs outside the blocks, attention and the rest are bf16.
    return bf16_storage(precision) ? peak.bf16 : peak.fp32;
  }
  return std::nullopt;
}

void ThroughputStats::add_step(double seconds, int64_t tokens) {
  seconds_.push_back(seconds);
  tokens_.push_back(tokens);
}

int ThroughputStats::warmup_steps_excluded() const {
  return std::min(3, std::max(0, steps() - 1));
}

double ThroughputStats::mean_tokens_per_s() const {
  double seconds = 0.0;
  double tokens = 0.0;
  for (size_t i = static_cast<size_t>(warmup_steps_excluded()); i < seconds_.size(); ++i) {
    seconds += seconds_[i];
    tokens += static_cast<double>(tokens_[i]);
  }
  return seconds > 0.0 ? tokens / seconds : 0.0;
}

double ThroughputStats::mean_step_seconds() const {
  if (seconds_.empty()) return 0.0;
  const size_t first = static_cast<size_t>(warmup_steps_excluded());
  double sum = 0.0;
  for (size_t i = first; i < seconds_.size(); ++i) sum += seconds_[i];
  return sum / static_cast<double>(seconds_.size() - first);
}

}  // namespace gpt2
