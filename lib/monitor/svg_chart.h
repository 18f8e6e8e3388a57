// A line chart as a standalone SVG document: axes with "nice" ticks and labels, a grid, one
// polyline per series, a legend and a title. No plotting library; the chart is a few hundred bytes
// of markup per series.
#pragma once
#include <string>
#include <vector>

namespace spmd {

struct ChartSeries {
  std::string name;   // legend text
  std::string color;  // an SVG color, e.g. "#1f77b4"
  std::vector<double> x, y;  // same length; points with a non-finite coordinate are left out
  bool markers = false;      // a dot on each point (sparse series; a lone point always gets one)
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
};

std::string render_svg(const LineChart& chart);

// About `target` round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target);

}  // namespace spmd
