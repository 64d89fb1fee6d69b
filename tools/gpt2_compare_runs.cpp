/**
 * @file gpt2_compare_runs.cpp
 * @brief gpt2-compare-runs: the loss curves of several gpt2-train runs side by side, as CSV, an
 *        SVG plot and a table (issue 22's bf16 against fp8 comparison, or any other).
 *
 *   gpt2-compare-runs --run bf16=out/bf16 --run fp8=out/fp8 --out out/compare
 *
 * Each --run is NAME=PATH, PATH a run folder (its metrics.jsonl) or a metrics.jsonl itself. Runs
 * to compare should share their --model, --seed, data and schedule (gpt2-train then starts them
 * from the same initialization and feeds them the same batches), differing in what is being
 * compared (--precision). Writes OUT/curves.csv (one row per step: each run's train and val
 * loss, empty where a run has none), OUT/curves.svg (two panels: the train loss as means of
 * --smooth steps, the val loss; base/svg_plot.h), and prints per run the final train loss (mean
 * of the last --smooth steps), the final and lowest val loss, the mean of its last --last val
 * losses (steadier than the final one alone: one evaluation's noise is averaged out), and each
 * relative to the first run. With --axis time the curves are against each run's training time instead (the sum of
 * its steps' "ms", evaluation not included: the runs at equal time, where a faster precision
 * shows its gain), the CSV's first column is seconds, and the table adds each run's val loss at
 * the latest time every run reached with a validation (linear between its validations). Exit 2
 * for a bad command line, 1 for a run that cannot be read, has no loss, or (--axis time) lacks
 * a step's time.
 */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "base/command_line.h"
#include "base/error.h"
#include "base/file_io.h"
#include "base/svg_plot.h"
#include "train/loss_plot.h"

namespace gpt2 {
namespace {

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

struct Run {
  std::string name;
  std::string metrics_file;
  LossCurves curves;  // x: the step, or with --axis time the training time in seconds
  double last_step = 0.0;
};

/// The curves against the training time: each point's x becomes the sum of the "ms" of every
/// step up to its own, in seconds. Throws gpt2::Error when a step with a loss has no time.
void put_on_time_axis(Run& run) {
  std::vector<PlotPoint>& ms = run.curves.step_ms;
  std::vector<double> seconds(ms.size());  // at the end of step ms[i].x
  double sum = 0.0;
  for (size_t i = 0; i < ms.size(); ++i) seconds[i] = (sum += ms[i].y) / 1000.0;
  auto to_time = [&](std::vector<PlotPoint>& points) {
    for (PlotPoint& p : points) {
      const auto it = std::lower_bound(ms.begin(), ms.end(), p.x,
                                       [](const PlotPoint& a, double step) { return a.x < step; });
      if (it == ms.end() || it->x != p.x)
        GPT2_FAIL("run ", run.name, ": step ", p.x, " in ", run.metrics_file,
                  " has no \"ms\"; --axis time needs every step's time");
      p.x = seconds[static_cast<size_t>(it - ms.begin())];
    }
  };
  to_time(run.curves.train);
  to_time(run.curves.val);
}

/// A val curve's loss at x, linear between its points; NaN outside them.
double val_at(const std::vector<PlotPoint>& val, double x) {
  for (size_t i = 0; i < val.size(); ++i) {
    if (val[i].x == x) return val[i].y;
    if (i > 0 && val[i - 1].x < x && x < val[i].x)
      return val[i - 1].y + (val[i].y - val[i - 1].y) * (x - val[i - 1].x) /
                                (val[i].x - val[i - 1].x);
  }
  return std::nan("");
}

Run parse_run(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    GPT2_USAGE_FAIL("--run takes NAME=PATH (a run folder or its metrics.jsonl), got '", text,
                    "'");
  Run run;
  run.name = text.substr(0, eq);
  const std::string path = text.substr(eq + 1);
  run.metrics_file = std::filesystem::is_directory(path)
                         ? (std::filesystem::path(path) / "metrics.jsonl").string()
                         : path;
  return run;
}

double mean_of_last(const std::vector<PlotPoint>& points, size_t count) {
  const size_t first = points.size() > count ? points.size() - count : 0;
  double sum = 0.0;
  for (size_t i = first; i < points.size(); ++i) sum += points[i].y;
  return sum / static_cast<double>(points.size() - first);
}

std::string curves_csv(const std::vector<Run>& runs, bool time_axis) {
  // x (step or seconds) -> (run, train or val) -> loss
  std::map<double, std::vector<std::string>> rows;
  for (size_t r = 0; r < runs.size(); ++r) {
    auto put = [&](const std::vector<PlotPoint>& points, size_t column) {
      for (const PlotPoint& p : points) {
        std::vector<std::string>& row = rows[p.x];
        row.resize(2 * runs.size());
        row[column] = str_cat(p.y);
      }
    };
    put(runs[r].curves.train, 2 * r);
    put(runs[r].curves.val, 2 * r + 1);
  }
  std::ostringstream csv;
  csv << (time_axis ? "seconds" : "step");
  for (const Run& run : runs) csv << ',' << run.name << "_train_loss," << run.name << "_val_loss";
  csv << '\n';
  for (const auto& [x, row] : rows) {
    csv << x;
    for (size_t i = 0; i < 2 * runs.size(); ++i) csv << ',' << (i < row.size() ? row[i] : "");
    csv << '\n';
  }
  return csv.str();
}

std::string curves_svg(const std::vector<Run>& runs, size_t smooth, bool time_axis,
                       const std::string& title) {
  PlotPanel train, val;
  train.title = smooth > 1 ? str_cat("train loss (mean of ", smooth, " steps)") : "train loss";
  val.title = "val loss";
  train.x_label = val.x_label =
      time_axis ? "training time, s (evaluation not included)" : "step";
  train.y_from_zero = val.y_from_zero = false;
  for (size_t r = 0; r < runs.size(); ++r) {
    PlotSeries series;
    series.name = runs[r].name;
    series.color = kColors[r % (sizeof(kColors) / sizeof(kColors[0]))];
    series.markers = false;
    series.points = group_means(runs[r].curves.train, std::max<size_t>(1, smooth));
    train.series.push_back(series);
    series.points = runs[r].curves.val;
    series.markers = true;
    val.series.push_back(std::move(series));
  }
  PlotFigure figure;
  figure.title = title;
  figure.panel_width = 520;
  figure.panel_height = 340;
  figure.panels = {std::move(train), std::move(val)};
  return render_svg(figure);
}

int compare_main(int argc, char** argv) {
  cxxopts::Options cli("gpt2-compare-runs",
                       "The loss curves of gpt2-train runs side by side: CSV, SVG and a table.");
  cli.add_options()
      ("run", "NAME=PATH: a run folder or its metrics.jsonl (two or more)", cxxopts::value<std::vector<std::string>>())
      ("out", "folder for curves.csv and curves.svg", cxxopts::value<std::string>()->default_value("out/compare"))
      ("smooth", "train-loss steps per plotted mean and in the final train loss", cxxopts::value<std::string>()->default_value("20"))
      ("last", "val losses in the table's mean of the last ones", cxxopts::value<std::string>()->default_value("5"))
      ("title", "the figure's title", cxxopts::value<std::string>()->default_value("loss curves"))
      ("axis", "step | time: the curves against the step or the training time (each run's "
       "steps' ms)", cxxopts::value<std::string>()->default_value("step"))
      ("h,help", "print this help");
  const cxxopts::ParseResult args = parse_tool_options(cli, argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", cli.help().c_str());
    return 0;
  }
  if (args.count("run") < 2) GPT2_USAGE_FAIL("give two runs or more (--run NAME=PATH each)");
  const size_t smooth =
      static_cast<size_t>(parse_positive_int("smooth", args["smooth"].as<std::string>()));
  const size_t last =
      static_cast<size_t>(parse_positive_int("last", args["last"].as<std::string>()));
  const std::string out = args["out"].as<std::string>();
  const std::string x_axis = args["axis"].as<std::string>();
  if (x_axis != "step" && x_axis != "time")
    GPT2_USAGE_FAIL("--axis takes step or time (got '", x_axis, "')");
  const bool time_axis = x_axis == "time";
  std::vector<Run> runs;
  for (const std::string& text : args["run"].as<std::vector<std::string>>())
    runs.push_back(parse_run(text));
  for (Run& run : runs) {
    run.curves = read_loss_curves(run.metrics_file);
    if (run.curves.train.empty())
      GPT2_FAIL("run ", run.name, ": no finite train loss in ", run.metrics_file);
    run.last_step = run.curves.train.back().x;
    if (time_axis) put_on_time_axis(run);
  }
  write_text_file((std::filesystem::path(out) / "curves.csv").string(),
                  curves_csv(runs, time_axis));
  write_text_file((std::filesystem::path(out) / "curves.svg").string(),
                  curves_svg(runs, smooth, time_axis, args["title"].as<std::string>()));

  // --axis time: every run's val loss at the latest time all of them reached with a validation.
  double common_time = std::numeric_limits<double>::infinity();
  for (const Run& run : runs)
    common_time = std::min(common_time, run.curves.val.empty() ? 0.0 : run.curves.val.back().x);
  const bool at_time = time_axis && common_time > 0.0;
  const double val_at_time0 = at_time ? val_at(runs[0].curves.val, common_time) : 0.0;
  int name_width = 12;  // the runs' column, as wide as the longest name
  for (const Run& run : runs) name_width = std::max(name_width, static_cast<int>(run.name.size()));
  char last_label[48];
  std::snprintf(last_label, sizeof last_label, "val, last %zu", last);
  std::printf("%-*s %6s %12s %12s %16s %10s %10s %12s %10s", name_width, "run", "steps",
              "final train", "final val", time_axis ? "lowest val (s)" : "lowest val (step)",
              "train/1st", "val/1st", last_label, "/1st");
  char at_label[48];
  std::snprintf(at_label, sizeof at_label, "val at %.1f s", common_time);
  if (at_time) std::printf(" %16s %10s", at_label, "/1st");
  std::printf("\n");
  const double train0 = mean_of_last(runs[0].curves.train, smooth);
  const double val0 = runs[0].curves.val.empty() ? 0.0 : runs[0].curves.val.back().y;
  // The mean of a run's last `last` val losses (all of them if it has fewer); NaN without any.
  auto mean_of_last_val = [&](const Run& run) {
    return run.curves.val.empty() ? std::nan("") : mean_of_last(run.curves.val, last);
  };
  const double last0 = mean_of_last_val(runs[0]);
  for (const Run& run : runs) {
    const double train = mean_of_last(run.curves.train, smooth);
    std::string final_val = "-", lowest = "-", val_ratio = "-";
    if (!run.curves.val.empty()) {
      const PlotPoint best = *std::min_element(
          run.curves.val.begin(), run.curves.val.end(),
          [](const PlotPoint& a, const PlotPoint& b) { return a.y < b.y; });
      final_val = str_cat(run.curves.val.back().y);
      char where[32];
      std::snprintf(where, sizeof where, time_axis ? "%.1f" : "%.0f", best.x);
      lowest = str_cat(best.y, " (", where, ")");
      if (val0 > 0.0) val_ratio = str_cat(run.curves.val.back().y / val0);
    }
    const double last_val = mean_of_last_val(run);
    std::printf("%-*s %6.0f %12.6f %12s %16s %10.5f %10s %12s %10s", name_width, run.name.c_str(),
                run.last_step, train, final_val.c_str(), lowest.c_str(), train / train0,
                val_ratio.c_str(), std::isnan(last_val) ? "-" : str_cat(last_val).c_str(),
                std::isnan(last_val) || !(last0 > 0.0) ? "-" : str_cat(last_val / last0).c_str());
    if (at_time) {
      const double v = val_at(run.curves.val, common_time);
      std::printf(" %16s %10s", std::isnan(v) ? "-" : str_cat(v).c_str(),
                  std::isnan(v) || std::isnan(val_at_time0) ? "-"
                                                             : str_cat(v / val_at_time0).c_str());
    }
    std::printf("\n");
  }
  std::printf("wrote %s/curves.csv and %s/curves.svg\n", out.c_str(), out.c_str());
  return 0;
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  return gpt2::run_tool_main("gpt2-compare-runs", [&] { return gpt2::compare_main(argc, argv); });
}
