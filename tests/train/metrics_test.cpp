// Metrics formatting and arithmetic: JSON lines that parse back with the exact "%.9g" floats,
// the flat-object parser on hand-written input, the warm-up exclusion of throughput, the MFU
// FLOP count, and metrics.jsonl truncation on resume.
#include "train/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

#include "data/file_io.h"
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
  const auto object = parse_flat_json_object(to_json_line(m));
  ASSERT_TRUE(object.has_value()) << to_json_line(m);
  for (const char* key : {"step", "loss", "val_loss", "lr", "grad_norm", "ms", "tokens_per_s",
                          "peak_mem_bytes", "attn", "device", "precision", "micro_batches"})
    EXPECT_EQ(object->count(key), 1u) << key;
  EXPECT_EQ(object->at("step"), "7");
  EXPECT_EQ(std::strtof(object->at("loss").c_str(), nullptr), m.loss);
  EXPECT_EQ(std::strtof(object->at("val_loss").c_str(), nullptr), *m.val_loss);
  EXPECT_EQ(std::strtof(object->at("lr").c_str(), nullptr), m.lr);
  EXPECT_EQ(std::strtof(object->at("grad_norm").c_str(), nullptr), m.grad_norm);
  EXPECT_EQ(object->at("peak_mem_bytes"), "5368709120");
  EXPECT_EQ(object->at("attn"), "flash");
  EXPECT_EQ(object->at("micro_batches"), "2");
}

TEST(Metrics, ValLossOnlyWhenMeasuredAndNonFiniteIsNull) {
  StepMetrics m = example_metrics();
  EXPECT_EQ(parse_flat_json_object(to_json_line(m))->count("val_loss"), 0u);
  m.loss = std::numeric_limits<float>::quiet_NaN();
  m.grad_norm = std::numeric_limits<float>::infinity();
  const auto object = parse_flat_json_object(to_json_line(m));
  ASSERT_TRUE(object.has_value()) << to_json_line(m);
  EXPECT_EQ(object->at("loss"), "null");
  EXPECT_EQ(object->at("grad_norm"), "null");
}

TEST(Metrics, FlatJsonParserAcceptsWhitespaceAndEscapesRejectsGarbage) {
  const auto ok = parse_flat_json_object(
      " { \"a\" : 1.5e-3 , \"b\":\"x\\\"y\\\\z\\u0041\", \"c\": null,\"d\":true } ");
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->at("a"), "1.5e-3");
  EXPECT_EQ(ok->at("b"), "x\"y\\zA");
  EXPECT_EQ(ok->at("c"), "null");
  EXPECT_EQ(ok->at("d"), "true");
  EXPECT_TRUE(parse_flat_json_object("{}").has_value());
  for (const char* bad : {"", "{", "{\"step\":3", "{\"step\":3,}", "{\"a\":1}x", "{\"a\":abc}",
                          "{\"a\":1,\"a\":2}", "[1]", "{\"a\":\"\\uZZZZ\"}", "{\"step\":"})
    EXPECT_FALSE(parse_flat_json_object(bad).has_value()) << bad;
  EXPECT_EQ(json_string("q\"\\\n"), "\"q\\\"\\\\\\u000a\"");
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
