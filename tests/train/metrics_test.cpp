// Metrics formatting and arithmetic: JSON lines that parse back with the exact floats, the
// warm-up exclusion of throughput, the MFU
// FLOP count, and metrics.jsonl truncation on resume.
#include "train/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>
#include <unistd.h>

#include "base/file_io.h"
#include "base/json.h"
#include "model/parameters.h"
#include "train/run_files.h"

namespace gpt2 {
namespace {

StepMetrics example_metrics() {
  StepMetrics m;
  m.step = 7;
  m.loss = 10.987654f;
  m.lr = 6e-4f;
  m.grad_norm = 1.2345678f;
  m.ms = 123.456;
  m.tokens_per_s = 2074.4;
  m.peak_mem_bytes = size_t{5} << 30;  // beyond 32 bits on purpose
  m.attn = "flash";
  m.device = "cpu";
  m.precision = "fp32";
  m.micro_batches = 2;
  return m;
}

TEST(Metrics, JsonLineRoundTripsFloatsBitForBit) {
  StepMetrics m = example_metrics();
  m.val_loss = 9.87654321f;
  const std::string line = to_json_line(m);
  const Json object = parse_json(line, "line");
  ASSERT_TRUE(object.is_object()) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  // Keys in the order the README lists them.
  std::vector<std::string> keys;
  for (const auto& item : object.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"step", "loss", "val_loss", "lr", "grad_norm", "ms",
                                            "tokens_per_s", "peak_mem_bytes", "attn", "device",
                                            "precision", "micro_batches"}));
  EXPECT_EQ(object.at("step"), 7);
  EXPECT_EQ(object.at("loss").get<float>(), m.loss);
  EXPECT_EQ(object.at("val_loss").get<float>(), *m.val_loss);
  EXPECT_EQ(object.at("lr").get<float>(), m.lr);
  EXPECT_EQ(object.at("grad_norm").get<float>(), m.grad_norm);
  EXPECT_EQ(object.at("ms").get<double>(), m.ms);
  EXPECT_EQ(object.at("peak_mem_bytes").get<uint64_t>(), uint64_t{5} << 30);
  EXPECT_EQ(object.at("attn"), "flash");
  EXPECT_EQ(object.at("micro_batches"), 2);
  // Floats are written as their shortest decimal, not as the widened double's 17 digits.
  EXPECT_NE(line.find("\"loss\":10.987654,"), std::string::npos) << line;
  EXPECT_NE(line.find("\"lr\":0.0006,"), std::string::npos) << line;
}

TEST(Metrics, ValLossOnlyWhenMeasuredAndNonFiniteIsNull) {
  StepMetrics m = example_metrics();
  EXPECT_EQ(parse_json(to_json_line(m), "line").count("val_loss"), 0u);
  m.loss = std::numeric_limits<float>::quiet_NaN();
  m.grad_norm = std::numeric_limits<float>::infinity();
  const Json object = parse_json(to_json_line(m), "line");
  EXPECT_TRUE(object.at("loss").is_null());
  EXPECT_TRUE(object.at("grad_norm").is_null());
}

// --precision fp8's count of saturated tensor casts: on every line of an fp8 run, zero too,
// after the other keys; absent from other runs' lines.
TEST(Metrics, Fp8SaturationOnlyInFp8Runs) {
  StepMetrics m = example_metrics();
  EXPECT_EQ(parse_json(to_json_line(m), "line").count("fp8_saturated"), 0u);
  m.precision = "fp8";
  m.fp8_saturated = 0;
  const std::string line = to_json_line(m);
  EXPECT_EQ(parse_json(line, "line").at("fp8_saturated"), 0);
  EXPECT_NE(line.find("\"micro_batches\":2,\"fp8_saturated\":0}"), std::string::npos) << line;
  m.fp8_saturated = 3;
  EXPECT_EQ(parse_json(to_json_line(m), "line").at("fp8_saturated"), 3);
}

TEST(Metrics, StepLineShowsTheFigures) {
  StepMetrics m = example_metrics();
  m.val_loss = 9.5f;
  const std::string line = format_step_line(m, 50, 125.0);
  for (const char* part : {"step  7/50", "loss 10.98765", "lr 6.000e-04", "norm 1.2346",
                           "123.5 ms", "2074 tok/s", "peak 5.00 GiB", "eta 2m05s",
                           "val loss 9.500000"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " in " << line;
  EXPECT_EQ(format_step_line(m, 50, -1.0).find("eta"), std::string::npos);
  EXPECT_EQ(format_duration(3725), "1h02m");
  EXPECT_EQ(format_duration(59.4), "59s");
}

TEST(Metrics, DataParallelStepsShowTheirCommunicationAndPeakPerRank) {
  StepMetrics m = example_metrics();
  EXPECT_EQ(parse_json(to_json_line(m), "line").count("world_size"), 0u);
  EXPECT_EQ(parse_json(to_json_line(m), "line").count("comm_ms"), 0u);
  EXPECT_EQ(format_step_line(m, 50, 1.0).find("comm"), std::string::npos);
  m.world_size = 8;
  m.comm_ms = 12.34;
  const Json object = parse_json(to_json_line(m), "line");
  EXPECT_EQ(object.at("world_size"), 8);
  EXPECT_EQ(object.at("comm_ms").get<double>(), 12.34);
  const std::string line = format_step_line(m, 50, 1.0);
  for (const char* part : {"123.5 ms (comm 12.3 ms) | 2074 tok/s", "peak 5.00 GiB per rank"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " in " << line;
}

TEST(Metrics, ThroughputExcludesUpToThreeWarmupSteps) {
  ThroughputStats one;
  one.add_step(2.0, 100);
  EXPECT_EQ(one.warmup_steps_excluded(), 0);
  EXPECT_DOUBLE_EQ(one.mean_tokens_per_s(), 50.0);

  ThroughputStats two;
  two.add_step(10.0, 100);
  two.add_step(0.5, 100);
  EXPECT_EQ(two.warmup_steps_excluded(), 1);
  EXPECT_DOUBLE_EQ(two.mean_tokens_per_s(), 200.0);

  ThroughputStats five;
  for (double seconds : {10.0, 5.0, 5.0, 1.0, 3.0}) five.add_step(seconds, 100);
  EXPECT_EQ(five.warmup_steps_excluded(), 3);
  EXPECT_DOUBLE_EQ(five.mean_tokens_per_s(), 200.0 / 4.0);  // tokens / time of steps 4 and 5
  EXPECT_DOUBLE_EQ(five.mean_step_seconds(), 2.0);
}

TEST(Metrics, FlopsPerTokenOfGpt2Small) {
  // llm.c's GPT-2 124M (Vp = 50304, maxT = 1024) has 124,475,904 parameters; then
  // 6 * (124475904 - 1024*768) + 6 * 12 * 1024 * 768 = 742,136,832 + 56,623,104.
  const ModelConfig config = model_config_from_preset("gpt2", 1024);
  ASSERT_EQ(ParameterLayout::for_config(config).total, 124475904u);
  EXPECT_DOUBLE_EQ(training_flops_per_token(config, 1024), 798759936.0);
  // The attention term grows with T only.
  EXPECT_DOUBLE_EQ(training_flops_per_token(config, 512), 798759936.0 - 6.0 * 12 * 512 * 768);
}

// The MFU denominator follows the device and the precision; an unknown device gets none.
TEST(Metrics, PeakFlopsByDeviceNameAndPrecision) {
  EXPECT_EQ(peak_flops("NVIDIA H100 80GB HBM3", Precision::kBf16), 989e12);
  EXPECT_EQ(peak_flops("NVIDIA H100 80GB HBM3", Precision::kFp32), 67e12);
  EXPECT_EQ(peak_flops("NVIDIA H100 PCIe", Precision::kBf16), 756e12);
  EXPECT_EQ(peak_flops("NVIDIA H100 NVL", Precision::kBf16), 835e12);
  EXPECT_EQ(peak_flops("NVIDIA H200", Precision::kBf16), 989e12);
  EXPECT_EQ(peak_flops("NVIDIA A100-SXM4-80GB", Precision::kBf16), 312e12);
  EXPECT_EQ(peak_flops("NVIDIA L40S", Precision::kFp32), 91.6e12);
  EXPECT_FALSE(peak_flops("NVIDIA GeForce GTX 1080", Precision::kBf16).has_value());
  EXPECT_FALSE(peak_flops("CPU (2 threads)", Precision::kFp32).has_value());
}

TEST(Metrics, TruncateKeepsStepsUpToTheCheckpointAndDropsTornLines) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("gpt2_metrics_test_" + std::to_string(getpid()))).string();
  make_directories(dir);
  const std::string path = metrics_path(dir);
  {
    std::ofstream out(path);
    for (int step = 1; step <= 6; ++step) {
      StepMetrics m = example_metrics();
      m.step = step;
      out << to_json_line(m) << "\n";
    }
    out << "{\"step\":7,\"loss\":1";  // torn by a crash
  }
  EXPECT_EQ(truncate_metrics(path, 4), 4);
  const std::string text = read_file_text(path);
  int lines = 0;
  for (size_t pos = 0; (pos = text.find('\n', pos)) != std::string::npos; ++pos) ++lines;
  EXPECT_EQ(lines, 4);
  EXPECT_NE(text.find("\"step\":4,"), std::string::npos);
  EXPECT_EQ(text.find("\"step\":5,"), std::string::npos);
  EXPECT_EQ(truncate_metrics(metrics_path(dir + "/missing"), 3), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpt2
