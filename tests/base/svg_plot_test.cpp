// base/svg_plot.h: ticks at 1/2/5 steps scaled to the data, labels with just the decimals they
// need (no "0K 0K 1K 1K" for values under a thousand), one consistent suffix per axis, and a
// message instead of empty axes for a panel without data.
#include "base/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace gpt2 {
namespace {

using Labels = std::vector<std::string>;

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(SvgPlot, NiceTicksCoverTheRangeInOneTwoFiveSteps) {
  const AxisTicks small = nice_ticks(0.0, 874.0);
  EXPECT_DOUBLE_EQ(small.step, 200.0);
  EXPECT_EQ(small.values, (std::vector<double>{0, 200, 400, 600, 800, 1000}));
  const AxisTicks loss = nice_ticks(10.357, 10.857);
  EXPECT_NEAR(loss.step, 0.1, 1e-12);
  EXPECT_LE(loss.values.front(), 10.357);
  EXPECT_GE(loss.values.back(), 10.857);
  EXPECT_NEAR(loss.values.front(), 10.3, 1e-9);
  EXPECT_NEAR(loss.values.back(), 10.9, 1e-9);
  // Exact multiples are not pushed to a further tick.
  EXPECT_EQ(nice_ticks(0.0, 0.3).values.size(), 4u);
  // One value: a range around it; none: [0, 1].
  const AxisTicks single = nice_ticks(4.0, 4.0);
  EXPECT_LT(single.values.front(), 4.0);
  EXPECT_GT(single.values.back(), 4.0);
  EXPECT_EQ(nice_ticks(0.0, 0.0).values.back(), 1.0);
}

TEST(SvgPlot, LabelsHaveTheDecimalsOfTheStepAndOneSuffixPerAxis) {
  EXPECT_EQ(tick_labels(nice_ticks(0.0, 874.0)), (Labels{"0", "200", "400", "600", "800", "1000"}));
  EXPECT_EQ(tick_labels(nice_ticks(0.0, 0.23)), (Labels{"0", "0.05", "0.10", "0.15", "0.20",
                                                        "0.25"}));
  EXPECT_EQ(tick_labels(nice_ticks(0.0, 38000.0)),
            (Labels{"0", "10K", "20K", "30K", "40K"}));
  EXPECT_EQ(tick_labels(nice_ticks(0.0, 7500.0)),
            (Labels{"0", "2000", "4000", "6000", "8000"}));
  EXPECT_EQ(tick_labels(nice_ticks(0.0, 2.4e6)),
            (Labels{"0", "0.5M", "1.0M", "1.5M", "2.0M", "2.5M"}));
  EXPECT_EQ(tick_labels(nice_ticks(0.0, 0.0004)).back(), "0.0004");
}

PlotFigure one_panel(std::vector<PlotSeries> series) {
  PlotPanel panel;
  panel.title = "tokens / s";
  panel.x_label = "T";
  panel.series = std::move(series);
  panel.empty_message = "nothing <succeeded>";
  PlotFigure figure;
  figure.title = "a & b";
  figure.panels.push_back(panel);
  return figure;
}

TEST(SvgPlot, DrawsEachSeriesWithItsPointsAndLegend) {
  PlotSeries a{"naive", "#d62728", {{1, 10}, {2, 20}, {3, 15}}, true};
  PlotSeries b{"flash", "#1f77b4", {{1, 12}, {2, std::nan("")}, {3, 30}}, false};
  const std::string svg = render_svg(one_panel({a, b}));
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("</svg>\n"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(count(svg, "<circle"), 3u);  // markers of the first series only
  EXPECT_NE(svg.find("&#9632; naive"), std::string::npos);
  EXPECT_NE(svg.find("&#9632; flash"), std::string::npos);
  EXPECT_NE(svg.find("a &amp; b"), std::string::npos);
  // The non-finite point is left out of the line: two points in the second polyline.
  const size_t second = svg.find("<polyline", svg.find("<polyline") + 1);
  const std::string points = svg.substr(second, svg.find("/>", second) - second);
  EXPECT_EQ(count(points, ","), 2u) << points;
  EXPECT_EQ(svg.find("nothing"), std::string::npos);
}

// Six long names do not fit one 400-pixel row: the legend wraps, every entry starts inside the
// frame, and the figure grows a row's height for each row past the first.
TEST(SvgPlot, ALegendTooWideForItsFrameWrapsAndTheFigureGrows) {
  std::vector<PlotSeries> series;
  for (int i = 0; i < 6; ++i)
    series.push_back({"fp8-gradient-margin-" + std::to_string(i), "#1f77b4", {{1, 1}, {2, 2}}});
  const std::string one_row = render_svg(one_panel({series[0]}));
  const std::string wrapped = render_svg(one_panel(series));
  auto height = [](const std::string& svg) {
    const size_t at = svg.find("height='") + 8;
    return std::stoi(svg.substr(at, svg.find('\'', at) - at));
  };
  std::vector<int> rows;  // the legend entries' y, in order
  for (size_t at = wrapped.find("&#9632;"); at != std::string::npos;
       at = wrapped.find("&#9632;", at + 1)) {
    const size_t tag = wrapped.rfind("<text x='", at);
    const int x = std::stoi(wrapped.substr(tag + 9));
    const size_t y_at = wrapped.find("y='", tag) + 3;
    rows.push_back(std::stoi(wrapped.substr(y_at)));
    EXPECT_LT(x, 80 + 400) << "an entry starts past the frame";
  }
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_GT(rows.back(), rows.front());
  EXPECT_EQ(height(wrapped) - height(one_row), rows.back() - rows.front());
}

TEST(SvgPlot, APanelWithoutDataSaysSoInsteadOfDrawingAxes) {
  PlotSeries empty{"naive", "#d62728", {}, true};
  PlotSeries only_nan{"flash", "#1f77b4", {{1, std::nan("")}}, true};
  const std::string svg = render_svg(one_panel({empty, only_nan}));
  EXPECT_NE(svg.find("nothing &lt;succeeded&gt;"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("<polyline"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("<line"), std::string::npos) << svg;  // no grid
  EXPECT_EQ(svg.find("text-anchor='end'"), std::string::npos) << svg;  // no y tick labels
}

}  // namespace
}  // namespace gpt2
