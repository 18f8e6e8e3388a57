// The loss chart: reading metrics.jsonl (errors name file:line) and the SVG it becomes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "test_support.h"
#include "monitor/loss_plot.h"
#include "monitor/svg_chart.h"
#include "usage_error.h"

using namespace spmd;

namespace {
// The point count of each <polyline> in document order.
std::vector<size_t> polyline_point_counts(const std::string& svg) {
  std::vector<size_t> counts;
  static const std::regex polyline("<polyline[^>]* points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), polyline); it != std::sregex_iterator(); ++it) {
    const std::string points = (*it)[1];
    counts.push_back(points.empty() ? 0 : static_cast<size_t>(std::count(points.begin(), points.end(), ' ')) + 1);
  }
  return counts;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Every element opened is closed, in order (the SVG is well-formed as far as tags go).
bool tags_balance(const std::string& svg) {
  std::vector<std::string> open;
  static const std::regex tag("<(/?)([a-zA-Z]+)[^>]*?(/?)>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tag); it != std::sregex_iterator(); ++it) {
    if ((*it)[3] == "/") continue;
    if ((*it)[1] == "") {
      open.push_back((*it)[2]);
    } else {
      if (open.empty() || open.back() != (*it)[2]) return false;
      open.pop_back();
    }
  }
  return open.empty();
}
}  // namespace

TEST_CASE("loss plot: train and val polylines with one point per finite value") {
  LossCurves curves{{0, 1, 2, 3, 4}, {4.0, 3.5, NAN, 3.0, 2.8}, {2, 4}, {3.6, 3.1}};
  const std::string svg = loss_plot_svg(curves, "tiny <run> & co");
  CHECK(polyline_point_counts(svg) == std::vector<size_t>{4, 2});  // the NaN is left out
  CHECK(count_of(svg, "<circle") == 2);                               // val points are marked
  CHECK(svg.find("tiny &lt;run&gt; &amp; co") != std::string::npos);
  CHECK(svg.find(">train loss<") != std::string::npos);
  CHECK(svg.find(">val loss<") != std::string::npos);
  CHECK(svg.find(">step<") != std::string::npos);
  CHECK(tags_balance(svg));
}

TEST_CASE("loss plot: a single point, and no val series") {
  const std::string svg = loss_plot_svg(LossCurves{{7}, {2.0}, {}, {}}, "one");
  CHECK(polyline_point_counts(svg) == std::vector<size_t>{1});
  CHECK(count_of(svg, "<circle") == 1);  // a lone point is drawn as a dot
  CHECK(svg.find("val loss") == std::string::npos);
  CHECK(svg.find("nan") == std::string::npos);
  CHECK(tags_balance(svg));
  CHECK(loss_plot_svg(LossCurves{}, "empty").find("no data") != std::string::npos);
}

TEST_CASE("loss plot: ticks are round numbers covering the data") {
  CHECK(nice_ticks(0, 999, 6) == std::vector<double>{0, 200, 400, 600, 800, 1000});
  CHECK(nice_ticks(2.31, 3.87, 6) == std::vector<double>{2.0, 2.5, 3.0, 3.5, 4.0});
}

TEST_CASE("loss plot: metrics.jsonl lines are read, and a malformed line names file:line") {
  test::TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  test::write_file(path, "{\"step\": 0, \"loss\": 4.2}\n\n{\"step\": 5, \"loss\": null, \"val_loss\": 3.9}\n");
  LossCurves c = read_loss_curves(path);
  CHECK(c.step == std::vector<double>{0});
  CHECK(c.val_step == std::vector<double>{5});
  test::write_file(path, "{\"step\": 0, \"loss\": 4.2}\n{\"step\": 1, \"loss\": 4.\n");
  CHECK(test::usage_error_of([&] { read_loss_curves(path); }).find(path + ":2:") != std::string::npos);
  test::write_file(path, "{\"loss\": 4.2}\n");
  CHECK(test::usage_error_of([&] { read_loss_curves(path); }).find(path + ":1: no numeric \"step\"") != std::string::npos);
  test::write_file(path, "{\"step\": 1, \"loss\": \"low\"}\n");
  CHECK(test::usage_error_of([&] { read_loss_curves(path); }).find(":1: \"loss\" must be a number") != std::string::npos);
  CHECK(test::usage_error_of([&] { read_loss_curves(dir.file("absent.jsonl")); }).find("absent.jsonl") != std::string::npos);
}
