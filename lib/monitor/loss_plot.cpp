// metrics.jsonl -> loss chart (see loss_plot.h).
#include "monitor/loss_plot.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "monitor/svg_chart.h"
#include "util/durable_file.h"
#include "util/error.h"

namespace spmd {

namespace {
// The number under `key`, NaN when absent or null (nlohmann writes NaN as null); UsageError for
// anything else.
double optional_number(const nlohmann::json& record, const char* key, const std::string& where) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) return NAN;
  SPMD_CHECK(it->is_number(), "{}: \"{}\" must be a number, got {}", where, key, it->dump());
  return it->get<double>();
}

void read_line(const std::string& line, const std::string& where, LossCurves& curves) {
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    throw UsageError(fmt::format("{}: not a JSON line: {}", where, e.what()));
  }
  SPMD_CHECK(record.is_object(), "{}: expected a JSON object, got {}", where, record.type_name());
  const double step = optional_number(record, "step", where);
  SPMD_CHECK(std::isfinite(step), "{}: no numeric \"step\"", where);
  if (double loss = optional_number(record, "loss", where); std::isfinite(loss))
    curves.step.push_back(step), curves.loss.push_back(loss);
  if (double val = optional_number(record, "val_loss", where); std::isfinite(val))
    curves.val_step.push_back(step), curves.val_loss.push_back(val);
}
}  // namespace

LossCurves read_loss_curves(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  SPMD_CHECK(in.is_open(), "cannot read metrics file {}: {}", metrics_path, std::strerror(errno));
  LossCurves curves;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines say nothing
    read_line(line, fmt::format("{}:{}", metrics_path, number), curves);
  }
  SPMD_CHECK(!in.bad(), "reading {} failed: {}", metrics_path, std::strerror(errno));
  return curves;
}

std::string loss_plot_svg(const LossCurves& curves, const std::string& title) {
  LineChart chart{title, "step", "loss", {}};
  chart.series.push_back({"train loss", "#1f77b4", curves.step, curves.loss, false});
  if (!curves.val_step.empty()) chart.series.push_back({"val loss", "#d62728", curves.val_step, curves.val_loss, true});
  return render_svg(chart);
}

void write_loss_plot(const std::string& metrics_path, const std::string& svg_path, const std::string& title) {
  const std::string svg = loss_plot_svg(read_loss_curves(metrics_path), title);
  const std::string temp = svg_path + ".tmp";
  write_file_durably(temp, svg);
  std::error_code ec;
  std::filesystem::rename(temp, svg_path, ec);
  if (ec) throw RuntimeError(fmt::format("cannot write {}: {}", svg_path, ec.message()));
}

}  // namespace spmd
