// The loss curve of a run, from its metrics.jsonl: train and validation loss against step, as
// an SVG chart (train/svg_chart.h). Written at the end of a run and by `spmd-train plot`.
#pragma once
#include <string>
#include <vector>

namespace spmd {

struct LossCurves {
  std::vector<double> step, loss;          // every line with a numeric "loss"
  std::vector<double> val_step, val_loss;  // lines with a numeric "val_loss"
};

// Reads metrics.jsonl lines ({"step": N, "loss": L, "val_loss": V, ...}; null or absent values
// are skipped). UsageError for a missing file, or naming file:line for a malformed line.
LossCurves read_loss_curves(const std::string& metrics_path);

std::string loss_plot_svg(const LossCurves& curves, const std::string& title);

// Reads metrics_path and writes the chart to svg_path whole (temporary file, then rename).
void write_loss_plot(const std::string& metrics_path, const std::string& svg_path, const std::string& title);

}  // namespace spmd
