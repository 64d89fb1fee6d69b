#include "base/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace gpt2 {
namespace {

constexpr int kFirstLeft = 80;   // room for the y tick labels
constexpr int kPanelGap = 110;   // between one frame and the next one's tick labels
constexpr int kTop = 70;         // the figure's title and the panel's title above the frame
constexpr int kBottom = 80;      // x tick labels, x label and legend below the frame
constexpr int kRight = 50;
constexpr int kLegendCharPx = 7;  // a legend entry's width per character of its name
constexpr int kLegendRowPx = 16;  // a further legend row, added below the figure's kBottom

// A coordinate with one decimal: enough for a pixel, short in a long polyline.
std::string coord(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

bool finite_point(const PlotPoint& p) { return std::isfinite(p.x) && std::isfinite(p.y); }

struct LegendSlot {
  int x = 0;
  int row = 0;
};

// Where each series' legend entry goes under a frame at `left`, `width` wide: left to right, on
// a new row when the entry (its square, a space and its name) would run past the frame's right.
std::vector<LegendSlot> legend_slots(const PlotPanel& panel, int left, int width) {
  std::vector<LegendSlot> slots;
  int x = left + 10, row = 0;
  for (const PlotSeries& series : panel.series) {
    const int text = kLegendCharPx * static_cast<int>(series.name.size() + 2);
    if (x > left + 10 && x + text > left + width) {
      x = left + 10;
      ++row;
    }
    slots.push_back({x, row});
    x += text + 16;
  }
  return slots;
}

int legend_rows(const PlotPanel& panel, int width) {
  const std::vector<LegendSlot> slots = legend_slots(panel, 0, width);
  return slots.empty() ? 1 : slots.back().row + 1;
}

struct Range {
  double lo = 0.0, hi = 0.0;
  bool any = false;
  void add(double v) {
    lo = any ? std::min(lo, v) : v;
    hi = any ? std::max(hi, v) : v;
    any = true;
  }
};

void render_empty_panel(std::ostringstream& svg, const PlotPanel& panel, int left, int width,
                        int height) {
  svg << "<rect x='" << left << "' y='" << kTop << "' width='" << width << "' height='" << height
      << "' fill='none' stroke='#bbb' stroke-dasharray='4 4'/>\n";
  svg << "<text x='" << left + width / 2 << "' y='" << kTop - 10 << "' text-anchor='middle'>"
      << xml_escape(panel.title) << "</text>\n";
  svg << "<text x='" << left + width / 2 << "' y='" << kTop + height / 2
      << "' text-anchor='middle' fill='#666'>" << xml_escape(panel.empty_message) << "</text>\n";
}

void render_panel(std::ostringstream& svg, const PlotPanel& panel, int left, int width,
                  int height) {
  Range x_range, y_range;
  for (const PlotSeries& series : panel.series)
    for (const PlotPoint& p : series.points)
      if (finite_point(p) && (!panel.x_log2 || p.x > 0)) {
        x_range.add(panel.x_log2 ? std::log2(p.x) : p.x);
        y_range.add(p.y);
      }
  if (!y_range.any) {
    render_empty_panel(svg, panel, left, width, height);
    return;
  }
  if (panel.y_from_zero) {
    y_range.lo = std::min(0.0, y_range.lo);
    y_range.hi = std::max(0.0, y_range.hi);
  }
  const AxisTicks y_ticks = nice_ticks(y_range.lo, y_range.hi);
  const double y_lo = y_ticks.values.front(), y_hi = y_ticks.values.back();

  // x: log2 over the given ticks and the data, or linear over the asked or the data's range.
  std::vector<PlotTick> x_ticks = panel.x_ticks;
  double x_lo = x_range.lo, x_hi = x_range.hi;
  if (panel.x_log2) {
    for (const PlotTick& tick : x_ticks)
      if (tick.x > 0) {
        x_lo = std::min(x_lo, std::log2(tick.x));
        x_hi = std::max(x_hi, std::log2(tick.x));
      }
  } else {
    if (panel.x_min) x_lo = *panel.x_min;
    if (panel.x_max) x_hi = *panel.x_max;
    if (x_ticks.empty()) {
      const AxisTicks nice = nice_ticks(x_lo, x_hi);
      const std::vector<std::string> labels = tick_labels(nice);
      for (size_t i = 0; i < nice.values.size(); ++i) {
        const double v = nice.values[i];
        if (v >= x_lo - 1e-9 * nice.step && v <= x_hi + 1e-9 * nice.step)
          x_ticks.push_back({v, labels[i]});
      }
    }
  }
  const auto x_of = [&](double x) {
    const double u = panel.x_log2 ? std::log2(x) : x;
    return left + (x_hi > x_lo ? (u - x_lo) / (x_hi - x_lo) : 0.5) * width;
  };
  const auto y_of = [&](double y) { return kTop + height - (y - y_lo) / (y_hi - y_lo) * height; };

  svg << "<rect x='" << left << "' y='" << kTop << "' width='" << width << "' height='" << height
      << "' fill='none' stroke='#444'/>\n";
  svg << "<text x='" << left + width / 2 << "' y='" << kTop - 10 << "' text-anchor='middle'>"
      << xml_escape(panel.title) << "</text>\n";
  const std::vector<std::string> y_labels = tick_labels(y_ticks);
  for (size_t i = 0; i < y_ticks.values.size(); ++i) {
    const double v = y_ticks.values[i];
    const std::string y = coord(y_of(v));
    svg << "<line x1='" << left << "' x2='" << left + width << "' y1='" << y << "' y2='" << y
        << "' stroke='#ddd'/>\n<text x='" << left - 6 << "' y='" << coord(y_of(v) + 4)
        << "' text-anchor='end'>" << y_labels[i] << "</text>\n";
  }
  for (const PlotTick& tick : x_ticks) {
    if (panel.x_log2 && tick.x <= 0) continue;
    svg << "<text x='" << coord(x_of(tick.x)) << "' y='" << kTop + height + 16
        << "' text-anchor='middle'>" << xml_escape(tick.label) << "</text>\n";
  }
  svg << "<text x='" << left + width / 2 << "' y='" << kTop + height + 34
      << "' text-anchor='middle'>" << xml_escape(panel.x_label) << "</text>\n";

  const std::vector<LegendSlot> legend = legend_slots(panel, left, width);
  for (size_t s = 0; s < panel.series.size(); ++s) {
    const PlotSeries& series = panel.series[s];
    std::string points;
    for (const PlotPoint& p : series.points) {
      if (!finite_point(p) || (panel.x_log2 && p.x <= 0)) continue;
      points += coord(x_of(p.x)) + "," + coord(y_of(p.y)) + " ";
      if (series.markers)
        svg << "<circle cx='" << coord(x_of(p.x)) << "' cy='" << coord(y_of(p.y))
            << "' r='3' fill='" << series.color << "'/>\n";
    }
    if (!points.empty()) points.pop_back();
    svg << "<polyline fill='none' stroke-width='2' stroke='" << series.color << "' points='"
        << points << "'/>\n";
    svg << "<text x='" << legend[s].x << "' y='" << kTop + height + 56 + kLegendRowPx * legend[s].row
        << "' fill='" << series.color << "'>&#9632; " << xml_escape(series.name) << "</text>\n";
  }
  for (const PlotNote& note : panel.notes) {
    if (panel.x_log2 && note.x <= 0) continue;
    const std::string color =
        note.series < panel.series.size() ? panel.series[note.series].color : "#444";
    svg << "<text x='" << coord(x_of(note.x)) << "' y='" << kTop + 14 + 14 * note.series
        << "' text-anchor='middle' fill='" << color << "'>" << xml_escape(note.text)
        << "</text>\n";
  }
}

}  // namespace

AxisTicks nice_ticks(double lo, double hi, int intervals) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = hi = 0.0;
  if (lo > hi) std::swap(lo, hi);
  if (hi == lo) {  // one value: a unit range from 0, else 10% around it
    const double half = lo == 0.0 ? 0.0 : std::fabs(lo) * 0.05;
    lo -= half;
    hi += lo == 0.0 && half == 0.0 ? 1.0 : half;
  }
  const double raw = (hi - lo) / std::max(1, intervals);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double residual = raw / magnitude;
  const double nice = residual <= 1.0 ? 1.0 : residual <= 2.0 ? 2.0 : residual <= 5.0 ? 5.0 : 10.0;
  AxisTicks ticks;
  ticks.step = nice * magnitude;
  // A relative tolerance keeps 0.3 / 0.1 from rounding up to a fourth tick.
  const double first = std::floor(lo / ticks.step + 1e-9);
  const double last = std::ceil(hi / ticks.step - 1e-9);
  for (double i = first; i <= last; ++i) {
    const double v = i * ticks.step;
    ticks.values.push_back(v == 0.0 ? 0.0 : v);  // never "-0"
  }
  if (ticks.values.size() == 1) ticks.values.push_back(ticks.values.front() + ticks.step);
  return ticks;
}

std::vector<std::string> tick_labels(const AxisTicks& ticks) {
  double largest = std::fabs(ticks.step);
  for (const double v : ticks.values) largest = std::max(largest, std::fabs(v));
  const double scale = largest >= 1e9 ? 1e9 : largest >= 1e6 ? 1e6 : largest >= 1e4 ? 1e3 : 1.0;
  const char* suffix = scale == 1e9 ? "G" : scale == 1e6 ? "M" : scale == 1e3 ? "K" : "";
  const double scaled_step = ticks.step / scale;
  const int decimals =
      scaled_step > 0 ? std::max(0, -static_cast<int>(std::floor(std::log10(scaled_step) + 1e-9)))
                      : 0;
  std::vector<std::string> labels;
  for (const double v : ticks.values) {
    if (std::fabs(v) < 1e-9 * std::fabs(ticks.step)) {
      labels.push_back("0");
      continue;
    }
    char text[64];
    std::snprintf(text, sizeof text, "%.*f%s", std::min(decimals, 12), v / scale, suffix);
    labels.push_back(text);
  }
  return labels;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&apos;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_svg(const PlotFigure& figure) {
  const int panels = std::max<int>(1, static_cast<int>(figure.panels.size()));
  const int width = kFirstLeft + panels * figure.panel_width + (panels - 1) * kPanelGap + kRight;
  int rows = 1;
  for (const PlotPanel& panel : figure.panels)
    rows = std::max(rows, legend_rows(panel, figure.panel_width));
  const int height = kTop + figure.panel_height + kBottom + kLegendRowPx * (rows - 1);
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
      << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
         "fill='white'/>\n<text x='" << width / 2 << "' y='24' text-anchor='middle' "
         "font-size='15'>" << xml_escape(figure.title) << "</text>\n";
  for (size_t i = 0; i < figure.panels.size(); ++i) {
    const int left = kFirstLeft + static_cast<int>(i) * (figure.panel_width + kPanelGap);
    render_panel(svg, figure.panels[i], left, figure.panel_width, figure.panel_height);
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace gpt2
