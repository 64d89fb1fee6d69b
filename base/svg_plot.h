/**
 * @file svg_plot.h
 * @brief Line plots as standalone SVG text: the figures of gpt2-sweep (sweep.svg) and
 *        gpt2-train (loss.svg) in one style.
 *
 * A figure is a title over one or more panels side by side. A panel is a framed plot area with
 * its title above, light horizontal grid lines at the y ticks, x tick labels and the x label
 * below, and a legend (a colored square and the series' name for each, in as many rows as the
 * frame's width needs; the figure grows to hold them) under that. Each series is
 * drawn as a polyline through its points (points whose x or y is not finite are left out), with
 * a dot at each point unless markers is off; a PlotNote writes a short word (e.g. "OOM") in a
 * series' color at the top of the panel at its x.
 * Axes: y ticks are nice_ticks() over the data (from 0 when y_from_zero), labeled by
 * tick_labels(); x is linear with nice ticks over [x_min, x_max] (data range where unset), or
 * log2 with the caller's ticks and labels. A panel with no finite point draws no axes: its
 * frame holds empty_message instead, so a figure never shows empty axes as if they were data.
 * All text is XML-escaped.
 */
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gpt2 {

/// Tick values at a step of 1, 2 or 5 times a power of ten, about `intervals` intervals,
/// covering [lo, hi] (first <= lo, last >= hi). lo == hi widens to a unit (or 10%) range.
struct AxisTicks {
  double step = 1.0;
  std::vector<double> values;  // ascending, first and last are the axis' ends
};
AxisTicks nice_ticks(double lo, double hi, int intervals = 5);

/// The ticks' labels, with the decimals the step needs and nothing more (0.002, 2.5, 120); on an
/// axis reaching 10 000 or more, in thousands, millions or billions with a K, M or G suffix
/// (20K, 1.5M); 0 as "0".
std::vector<std::string> tick_labels(const AxisTicks& ticks);

struct PlotPoint {
  double x = 0.0;
  double y = 0.0;
};

struct PlotSeries {
  std::string name;   // the legend's text
  std::string color;  // an SVG color, "#1f77b4"
  std::vector<PlotPoint> points;
  bool markers = true;  // a dot at each point
};

struct PlotNote {
  double x = 0.0;
  std::string text;   // "OOM"
  size_t series = 0;  // whose color and row (the n-th series' notes sit on the n-th row)
};

struct PlotTick {
  double x = 0.0;
  std::string label;
};

struct PlotPanel {
  std::string title;    // above the frame: what y is ("tokens / s", "loss")
  std::string x_label;  // below the tick labels
  bool x_log2 = false;  // log2 x: x_ticks must be given
  std::vector<PlotTick> x_ticks;  // given ticks (empty: nice ticks over the x range)
  std::optional<double> x_min, x_max;  // linear x range (unset: the data's)
  bool y_from_zero = true;
  std::vector<PlotSeries> series;
  std::vector<PlotNote> notes;
  std::string empty_message = "no data to plot";
};

struct PlotFigure {
  std::string title;
  std::vector<PlotPanel> panels;
  int panel_width = 400;
  int panel_height = 300;
};

/// The whole SVG document, ending in a newline.
std::string render_svg(const PlotFigure& figure);

/// Text with &, <, >, ' and " as XML entities.
std::string xml_escape(const std::string& text);

}  // namespace gpt2
