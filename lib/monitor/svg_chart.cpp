// SVG line chart (see svg_chart.h). Layout in pixels: a fixed 800x480 canvas, the plot area inside
// fixed margins; data coordinates map linearly onto it.
#include "monitor/svg_chart.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace spmd {

namespace {
constexpr double kWidth = 800, kHeight = 480;
constexpr double kLeft = 72, kRight = 24, kTop = 48, kBottom = 56;
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<std::pair<double, double>> finite_points(const ChartSeries& s) {
  std::vector<std::pair<double, double>> points;
  for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
    if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) points.emplace_back(s.x[i], s.y[i]);
  return points;
}

// One axis: its domain (the data, widened by `margin` of its span on each side) and the round
// ticks inside it.
struct Axis {
  double lo = 0, hi = 1;
  std::vector<double> ticks;
  double to_unit(double v) const { return (v - lo) / (hi - lo); }
};

Axis make_axis(double lo, double hi, double margin) {
  if (!(lo <= hi)) lo = 0, hi = 1;  // no data
  if (hi - lo <= 1e-9 * std::max(1.0, std::fabs(lo))) {  // one value: give the axis some length
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad, hi += pad;
  }
  const double pad = (hi - lo) * margin;
  Axis axis{lo - pad, hi + pad, {}};
  const std::vector<double> ticks = nice_ticks(axis.lo, axis.hi, 6);
  const double near = (axis.hi - axis.lo) * 0.02;  // steps 0..999 end at a 1000 tick
  if (ticks.front() < axis.lo && ticks.front() >= axis.lo - near) axis.lo = ticks.front();
  if (ticks.back() > axis.hi && ticks.back() <= axis.hi + near) axis.hi = ticks.back();
  const double eps = (axis.hi - axis.lo) * 1e-9;
  for (double t : ticks)
    if (t >= axis.lo - eps && t <= axis.hi + eps) axis.ticks.push_back(t);
  return axis;
}

std::string tick_label(double v) { return fmt::format("{:g}", v); }

struct Frame {
  Axis x, y;
  double px(double v) const { return kLeft + x.to_unit(v) * kPlotW; }
  double py(double v) const { return kTop + (1 - y.to_unit(v)) * kPlotH; }
};

Frame make_frame(const std::vector<std::vector<std::pair<double, double>>>& all) {
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const auto& points : all)
    for (const auto& [x, y] : points) {
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
  return Frame{make_axis(x_lo, x_hi, 0.0), make_axis(y_lo, y_hi, 0.05)};  // steps start at the y axis
}

// Grid lines, the two axis lines, ticks, their labels and the axis titles.
void render_axes(std::string& svg, const Frame& f, const LineChart& chart) {
  const double x0 = kLeft, x1 = kLeft + kPlotW, y0 = kTop + kPlotH, y1 = kTop;
  svg += "<g class=\"grid\" stroke=\"#e5e5e5\" stroke-width=\"1\">\n";
  for (double t : f.x.ticks) svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\"/>\n", f.px(t), y0, y1);
  for (double t : f.y.ticks) svg += fmt::format("<line x1=\"{1}\" y1=\"{0:.1f}\" x2=\"{2}\" y2=\"{0:.1f}\"/>\n", f.py(t), x0, x1);
  svg += "</g>\n<g class=\"axes\" stroke=\"#333\" stroke-width=\"1\">\n";
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>\n", x0, y0, x1);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", x0, y0, y1);
  for (double t : f.x.ticks) svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\"/>\n", f.px(t), y0, y0 + 5);
  for (double t : f.y.ticks) svg += fmt::format("<line x1=\"{1}\" y1=\"{0:.1f}\" x2=\"{2}\" y2=\"{0:.1f}\"/>\n", f.py(t), x0 - 5, x0);
  svg += "</g>\n<g class=\"tick-labels\" fill=\"#333\">\n";
  for (double t : f.x.ticks)
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", f.px(t), y0 + 19, tick_label(t));
  for (double t : f.y.ticks)
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", x0 - 8, f.py(t) + 4, tick_label(t));
  svg += "</g>\n";
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + kPlotW / 2, kHeight - 14,
                     escape_xml(chart.x_label));
  svg += fmt::format("<text x=\"18\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {0})\">{1}</text>\n",
                     kTop + kPlotH / 2, escape_xml(chart.y_label));
}

void render_series(std::string& svg, const Frame& f, const ChartSeries& s, const std::vector<std::pair<double, double>>& points) {
  if (points.empty()) return;
  std::string coords;
  for (const auto& [x, y] : points) coords += fmt::format("{}{:.1f},{:.1f}", coords.empty() ? "" : " ", f.px(x), f.py(y));
  svg += fmt::format("<polyline class=\"series\" data-name=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" "
                     "stroke-linejoin=\"round\" points=\"{}\"/>\n",
                     escape_xml(s.name), s.color, coords);
  if (!s.markers && points.size() > 1) return;
  svg += fmt::format("<g class=\"markers\" fill=\"{}\">\n", s.color);
  for (const auto& [x, y] : points) svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\"/>\n", f.px(x), f.py(y));
  svg += "</g>\n";
}

void render_legend(std::string& svg, const std::vector<ChartSeries>& series) {
  const double w = 150, h = 10 + 20 * static_cast<double>(series.size());
  const double x = kLeft + kPlotW - w - 10, y = kTop + 10;
  svg += fmt::format("<g class=\"legend\">\n<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"white\" "
                     "fill-opacity=\"0.85\" stroke=\"#bbb\"/>\n", x, y, w, h);
  for (size_t i = 0; i < series.size(); ++i) {
    const double row = y + 15 + 20 * static_cast<double>(i);
    svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"/>\n", x + 8, row,
                       x + 32, row, series[i].color);
    svg += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", x + 40, row + 4, escape_xml(series[i].name));
  }
  svg += "</g>\n";
}
}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  const double raw = (hi - lo) / std::max(1, target - 1);
  if (!(raw > 0) || !std::isfinite(raw)) return {lo};
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  const double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * magnitude;
  std::vector<double> ticks;
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  for (double k = first; k <= last && ticks.size() < 100; ++k) ticks.push_back(k == 0 ? 0.0 : k * step);
  return ticks;
}

std::string render_svg(const LineChart& chart) {
  std::vector<std::vector<std::pair<double, double>>> points;
  for (const auto& s : chart.series) points.push_back(finite_points(s));
  const Frame frame = make_frame(points);
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" "
      "height=\"{1}\" viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">{3}</text>\n",
      kWidth, kHeight, kWidth / 2, escape_xml(chart.title));
  render_axes(svg, frame, chart);
  bool any = false;
  for (size_t i = 0; i < chart.series.size(); ++i) {
    render_series(svg, frame, chart.series[i], points[i]);
    any = any || !points[i].empty();
  }
  if (!any)
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n",
                       kLeft + kPlotW / 2, kTop + kPlotH / 2);
  render_legend(svg, chart.series);
  return svg + "</svg>\n";
}

}  // namespace spmd
