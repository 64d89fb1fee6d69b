#include "train/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <vector>

#include "base/error.h"
#include "base/file_io.h"
#include "base/json.h"
#include "base/svg_plot.h"

namespace gpt2 {
namespace {

constexpr const char* kTrainColor = "#1f77b4";
constexpr const char* kValColor = "#d62728";

// A finite number of a metrics line, or nothing (absent, null for a non-finite loss).
bool read_finite(const Json& row, const char* key, double* value) {
  const auto it = row.find(key);
  if (it == row.end() || !it->is_number()) return false;
  *value = it->get<double>();
  return std::isfinite(*value);
}

}  // namespace

std::vector<PlotPoint> group_means(const std::vector<PlotPoint>& points, size_t group) {
  std::vector<PlotPoint> means;
  for (size_t first = 0; first < points.size(); first += group) {
    const size_t end = std::min(points.size(), first + group);
    PlotPoint mean;
    for (size_t i = first; i < end; ++i) {
      mean.x += points[i].x;
      mean.y += points[i].y;
    }
    mean.x /= static_cast<double>(end - first);
    mean.y /= static_cast<double>(end - first);
    means.push_back(mean);
  }
  return means;
}

LossCurves read_loss_curves(const std::string& metrics_file) {
  LossCurves curves;
  std::istringstream lines(read_file_text(metrics_file));
  for (std::string line; std::getline(lines, line);) {
    const Json row = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    double step = 0.0, loss = 0.0;
    if (!row.is_object() || !read_finite(row, "step", &step)) continue;  // a torn line
    if (read_finite(row, "loss", &loss)) curves.train.push_back({step, loss});
    if (read_finite(row, "val_loss", &loss)) curves.val.push_back({step, loss});
    double ms = 0.0;
    if (read_finite(row, "ms", &ms)) curves.step_ms.push_back({step, ms});
  }
  return curves;
}

std::string loss_plot_path(const std::string& out_dir) {
  return (std::filesystem::path(out_dir) / "loss.svg").string();
}

std::string loss_plot_svg(const std::string& metrics_file, int total_steps,
                          const std::string& title) {
  LossCurves curves = read_loss_curves(metrics_file);
  PlotSeries train;
  train.name = "train loss";
  train.color = kTrainColor;
  train.markers = false;
  train.points = std::move(curves.train);
  PlotSeries val;
  val.name = "val loss";
  val.color = kValColor;
  val.points = std::move(curves.val);
  if (train.points.size() > static_cast<size_t>(kMaxPlottedTrainPoints)) {
    const size_t group = (train.points.size() + kMaxPlottedTrainPoints - 1) /
                         static_cast<size_t>(kMaxPlottedTrainPoints);
    train.points = group_means(train.points, group);
    train.name = str_cat("train loss (mean of ", group, " steps)");
  }

  PlotPanel panel;
  panel.title = "loss";
  panel.x_label = "step";
  panel.x_min = 0.0;
  panel.x_max = std::max(1, total_steps);
  panel.y_from_zero = false;
  panel.empty_message = "no finite loss in metrics.jsonl yet";
  panel.series.push_back(std::move(train));
  if (!val.points.empty()) panel.series.push_back(std::move(val));
  PlotFigure figure;
  figure.title = title;
  figure.panel_width = 640;
  figure.panel_height = 360;
  figure.panels.push_back(std::move(panel));
  return render_svg(figure);
}

void write_loss_plot(const std::string& out_dir, const std::string& metrics_file,
                     int total_steps, const std::string& title) {
  const std::string svg = loss_plot_svg(metrics_file, total_steps, title);
  write_text_file(loss_plot_path(out_dir), svg);
}

}  // namespace gpt2
