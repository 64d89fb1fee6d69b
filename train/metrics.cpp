#include "train/metrics.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "data/json_string.h"
#include "model/memory_plan.h"
#include "model/parameters.h"

namespace gpt2 {

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", value);
  return buf;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", byte);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string to_json_line(const StepMetrics& m) {
  std::string line = "{\"step\":" + std::to_string(m.step);
  line += ",\"loss\":" + json_number(m.loss);
  if (m.val_loss) line += ",\"val_loss\":" + json_number(*m.val_loss);
  line += ",\"lr\":" + json_number(m.lr);
  line += ",\"grad_norm\":" + json_number(m.grad_norm);
  line += ",\"ms\":" + json_number(m.ms);
  line += ",\"tokens_per_s\":" + json_number(m.tokens_per_s);
  line += ",\"peak_mem_bytes\":" + std::to_string(m.peak_mem_bytes);
  line += ",\"attn\":" + json_string(m.attn);
  line += ",\"device\":" + json_string(m.device);
  line += ",\"precision\":" + json_string(m.precision);
  line += ",\"micro_batches\":" + std::to_string(m.micro_batches);
  return line + "}";
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
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "step %*d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | peak %s",
                static_cast<int>(std::to_string(total_steps).size()), m.step, total_steps,
                m.loss, m.lr, m.grad_norm, m.ms, m.tokens_per_s,
                format_bytes(m.peak_mem_bytes).c_str());
  std::string line = buf;
  if (eta_seconds >= 0.0) line += " | eta " + format_duration(eta_seconds);
  if (m.val_loss) {
    std::snprintf(buf, sizeof buf, " | val loss %.6f", *m.val_loss);
    line += buf;
  }
  return line;
}

namespace {

void skip_spaces(const std::string& s, size_t& i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
}

// A JSON string starting at s[i] == '"'; advances i past the closing quote.
std::optional<std::string> parse_string(const std::string& s, size_t& i) {
  std::string out;
  if (!decode_json_string(s, i, &out).empty()) return std::nullopt;
  return out;
}

bool is_json_number(const std::string& t) {
  if (t.empty()) return false;
  char* end = nullptr;
  std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size() && (t[0] == '-' || std::isdigit(static_cast<unsigned char>(t[0])));
}

}  // namespace

std::optional<std::map<std::string, std::string>> parse_flat_json_object(const std::string& line) {
  std::map<std::string, std::string> values;
  size_t i = 0;
  skip_spaces(line, i);
  if (i >= line.size() || line[i] != '{') return std::nullopt;
  ++i;
  skip_spaces(line, i);
  if (i < line.size() && line[i] == '}') {
    ++i;
  } else {
    while (true) {
      skip_spaces(line, i);
      auto key = parse_string(line, i);
      if (!key) return std::nullopt;
      skip_spaces(line, i);
      if (i >= line.size() || line[i] != ':') return std::nullopt;
      ++i;
      skip_spaces(line, i);
      if (i >= line.size()) return std::nullopt;
      std::string value;
      if (line[i] == '"') {
        auto text = parse_string(line, i);
        if (!text) return std::nullopt;
        value = *text;
      } else {
        const size_t start = i;
        while (i < line.size() && line[i] != ',' && line[i] != '}' &&
               !std::isspace(static_cast<unsigned char>(line[i])))
          ++i;
        value = line.substr(start, i - start);
        if (value != "null" && value != "true" && value != "false" && !is_json_number(value))
          return std::nullopt;
      }
      if (!values.emplace(*key, value).second) return std::nullopt;  // duplicate key
      skip_spaces(line, i);
      if (i < line.size() && line[i] == ',') {
        ++i;
        continue;
      }
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      return std::nullopt;
    }
  }
  skip_spaces(line, i);
  if (i != line.size()) return std::nullopt;
  return values;
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
