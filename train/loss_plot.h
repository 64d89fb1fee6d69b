/**
 * @file loss_plot.h
 * @brief OUT/loss.svg: the run's loss curves, drawn from OUT/metrics.jsonl.
 *
 * One panel (base/svg_plot.h, the style of gpt2-sweep's plot): the train loss of every step as
 * a line and the validation loss as dots joined by a line, against the step, x from 0 to the
 * run's --steps (so a plot written mid-run shows how far the run is), y over the losses (not
 * from 0). A run of more than kMaxPlottedTrainPoints steps plots the mean of each group of
 * consecutive steps instead (the legend says how many). Steps whose loss is not finite
 * (skipped updates) are left out of the line. The plot is made from metrics.jsonl, so a resumed
 * run's plot holds the steps before the resume too. Lines that do not parse are skipped.
 * The trainer (rank 0) rewrites it atomically after every validation, at the end of the run
 * and at a signal's stop when the final checkpoint is saved then.
 */
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/svg_plot.h"

namespace gpt2 {

constexpr int kMaxPlottedTrainPoints = 2000;

/// A run's losses from its metrics.jsonl: (step, loss) of every step with a finite loss,
/// (step, val_loss) of every validation and (step, ms) of every step that gives its time. Lines
/// that do not parse are skipped. Throws gpt2::Error naming the file when it cannot be read.
struct LossCurves {
  std::vector<PlotPoint> train;
  std::vector<PlotPoint> val;
  std::vector<PlotPoint> step_ms;  // (step, its time in ms) of every step that gives one
};
LossCurves read_loss_curves(const std::string& metrics_file);

/// Means of consecutive groups of `group` points (the last group may be shorter).
std::vector<PlotPoint> group_means(const std::vector<PlotPoint>& points, size_t group);

std::string loss_plot_path(const std::string& out_dir);  // OUT/loss.svg

/// The SVG of the metrics.jsonl at metrics_file; title heads the figure. Throws gpt2::Error
/// naming the file when it cannot be read.
std::string loss_plot_svg(const std::string& metrics_file, int total_steps,
                          const std::string& title);

/// Writes loss_plot_svg(...) to loss_plot_path(out_dir) (base/file_io.h's AtomicFileWriter).
void write_loss_plot(const std::string& out_dir, const std::string& metrics_file,
                     int total_steps, const std::string& title);

}  // namespace gpt2
