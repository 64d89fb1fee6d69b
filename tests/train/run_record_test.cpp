// The record of a run: OUT/config.json holds every option as resolved (defaults filled in) and
// the binary's version, and a resume rewrites it saying so (and --model OUT is not taken for a
// Hugging Face directory because of it); OUT/loss.svg draws the train loss
// of every step and the validation losses from metrics.jsonl, in the plot style of gpt2-sweep,
// after each validation and at the end (a resumed run's plot holds the steps before the
// resume too).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "base/json.h"
#include "base/version.h"
#include "train/loss_plot.h"
#include "train/run_record.h"
#include "train_test_util.h"

namespace gpt2 {
namespace {

using testing::embedded_train_data;
using testing::embedded_val_data;
using testing::read_metrics;
using testing::run_trainer;
using testing::scratch_dir;

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The number of "x,y" pairs of the n-th polyline of an SVG.
size_t polyline_points(const std::string& svg, size_t n) {
  size_t at = svg.find("<polyline");
  for (size_t i = 0; i < n && at != std::string::npos; ++i) at = svg.find("<polyline", at + 1);
  if (at == std::string::npos) return 0;
  const size_t points = svg.find("points='", at) + 8;
  return count(svg.substr(points, svg.find('\'', points) - points), ",");
}

// d1 with B*T = 32 at a constant learning rate, so that a run may be continued to more steps.
std::vector<std::string> run_args(const std::string& out, int steps,
                                  std::vector<std::string> more = {}) {
  std::vector<std::string> args = {
      "--device", "cpu", "--model", "d1", "--max-seq-len", "64", "--seq-len", "16",
      "--batch-size", "2", "--steps", std::to_string(steps), "--lr-schedule", "constant",
      "--lr", "1e-3", "--seed", "7", "--val-every", "2", "--val-steps", "1",
      "--train-data", embedded_train_data(), "--val-data", embedded_val_data(), "--out", out};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(RunRecord, ConfigJsonHoldsTheResolvedOptionsAndTheVersion) {
  const std::string out = scratch_dir();
  const auto run = run_trainer(run_args(out, 3, {"--warmup-steps", "1"}));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string path = config_record_path(out);
  ASSERT_TRUE(file_exists(path)) << run.output;
  const Json record = parse_json(read_file_text(path), path);
  EXPECT_EQ(record.at("version"), std::string(build_version()));
  EXPECT_NE(record.at("version"), "");
  EXPECT_EQ(record.at("run_id"),
            parse_json(read_file_text(out + "/run.json"), "run.json").at("run_id"));
  EXPECT_EQ(record.at("start"), "new");
  EXPECT_FALSE(record.contains("resumed_from_step"));
  const Json& config = record.at("config");
  // Given values...
  EXPECT_EQ(config.at("lr_schedule").at("kind"), "constant");
  EXPECT_EQ(config.at("lr_schedule").at("max_lr").get<float>(), 1e-3f);
  EXPECT_EQ(config.at("lr_schedule").at("warmup_steps"), 1);
  EXPECT_EQ(config.at("seed"), 7);
  EXPECT_EQ(config.at("steps"), 3);
  EXPECT_EQ(config.at("batch_size"), 2);
  EXPECT_EQ(config.at("seq_len"), 16);
  EXPECT_EQ(config.at("data").at("train_data"), embedded_train_data());
  EXPECT_EQ(config.at("data").at("train_files"), Json::array({embedded_train_data()}));
  EXPECT_EQ(config.at("data").at("val_data"), embedded_val_data());
  EXPECT_EQ(config.at("model").at("name"), "d1");
  EXPECT_EQ(config.at("model").at("num_layers"), 1);
  EXPECT_EQ(config.at("model").at("max_seq_len"), 64);
  EXPECT_EQ(config.at("out_dir"), out);
  // ...and the defaults the resolution filled in.
  EXPECT_EQ(config.at("device"), "cpu");
  EXPECT_EQ(config.at("precision"), "fp32");
  EXPECT_EQ(config.at("attention"), "flash");
  EXPECT_EQ(config.at("total_batch_size"), 32);
  EXPECT_EQ(config.at("grad_accum_steps"), 1);
  EXPECT_EQ(config.at("world_size"), 1);
  EXPECT_EQ(config.at("weight_decay").get<float>(), 0.1f);
  EXPECT_EQ(config.at("grad_clip").get<float>(), 1.0f);
  EXPECT_EQ(config.at("lr_schedule").at("final_lr_frac").get<float>(), 0.1f);
  EXPECT_EQ(config.at("on_nonfinite"), "stop");
  EXPECT_EQ(config.at("save_final"), true);
  EXPECT_EQ(config.at("keep_checkpoints"), 3);
  EXPECT_NE(run.output.find(path), std::string::npos) << "the run names the file:\n"
                                                      << run.output;
  std::filesystem::remove_all(out);
}

// config.json in a run folder is not a Hugging Face config: --model OUT names the model file.
TEST(RunRecord, ARunFolderAsModelNamesItsNewestModelFile) {
  const std::string out = scratch_dir();
  ASSERT_EQ(run_trainer(run_args(out, 2)).exit_code, 0);
  const auto run = run_trainer({"--device", "cpu", "--model", out, "--steps", "1", "--out",
                                out + "/next"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("is a gpt2-train run folder"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(out + "/model_00000002.bin"), std::string::npos) << run.output;
  std::filesystem::remove_all(out);
}

TEST(RunRecord, LossSvgDrawsEveryTrainStepAndTheValidationPoints) {
  const std::string out = scratch_dir();
  const auto run = run_trainer(run_args(out, 5));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string svg = read_file_text(loss_plot_path(out));
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("&#9632; train loss"), std::string::npos);
  EXPECT_NE(svg.find("&#9632; val loss"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(polyline_points(svg, 0), 5u) << svg;  // steps 1..5
  EXPECT_EQ(polyline_points(svg, 1), 3u) << svg;  // validations at steps 2, 4 and 5 (the last)
  EXPECT_EQ(count(svg, "<circle"), 3u) << svg;
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(run.output.find(loss_plot_path(out)), std::string::npos) << run.output;
  std::filesystem::remove_all(out);
}

TEST(RunRecord, AResumeRewritesConfigJsonAndPlotsTheWholeRun) {
  const std::string out = scratch_dir();
  const auto first = run_trainer(run_args(out, 3));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string first_id =
      parse_json(read_file_text(config_record_path(out)), "config.json").at("run_id");
  const auto resumed = run_trainer(run_args(out, 6, {"--resume"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const Json record = parse_json(read_file_text(config_record_path(out)), "config.json");
  EXPECT_EQ(record.at("start"), "resume");
  EXPECT_EQ(record.at("resumed_from_step"), 3);
  EXPECT_EQ(record.at("run_id"), first_id);
  EXPECT_EQ(record.at("config").at("steps"), 6);
  EXPECT_EQ(record.at("config").at("resume"), true);
  EXPECT_EQ(read_metrics(out + "/metrics.jsonl").size(), 6u);
  const std::string svg = read_file_text(loss_plot_path(out));
  EXPECT_EQ(polyline_points(svg, 0), 6u) << svg;
  std::filesystem::remove_all(out);
}

TEST(RunRecord, LossPlotSkipsTornLinesAndNonFiniteLossesAndGroupsLongRuns) {
  const std::string dir = scratch_dir();
  const std::string metrics = dir + "/metrics.jsonl";
  {
    std::string text = "{\"step\":1,\"loss\":10.5}\n{\"step\":2,\"loss\":null}\n"
                       "{\"step\":3,\"loss\":9.5,\"val_loss\":9.75}\n{\"step\":4,\"lo";
    AtomicFileWriter writer(metrics);
    writer.write(text.data(), text.size());
    writer.commit();
  }
  const std::string svg = loss_plot_svg(metrics, 10, "short <run>");
  EXPECT_EQ(polyline_points(svg, 0), 2u) << svg;
  EXPECT_EQ(polyline_points(svg, 1), 1u) << svg;
  EXPECT_NE(svg.find("short &lt;run&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">10</text>"), std::string::npos) << "x runs to --steps:\n" << svg;

  std::string long_run;
  const int steps = 2 * kMaxPlottedTrainPoints + 10;
  for (int step = 1; step <= steps; ++step)
    long_run += "{\"step\":" + std::to_string(step) + ",\"loss\":" +
                std::to_string(5.0 + 1.0 / step) + "}\n";
  AtomicFileWriter writer(metrics);
  writer.write(long_run.data(), long_run.size());
  writer.commit();
  const std::string grouped = loss_plot_svg(metrics, steps, "long");
  EXPECT_LE(polyline_points(grouped, 0), static_cast<size_t>(kMaxPlottedTrainPoints));
  EXPECT_NE(grouped.find("train loss (mean of 3 steps)"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpt2
