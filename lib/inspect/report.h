// spmd-inspect's report: memory estimate and verdict, mesh, parameter layout table; text or JSON.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "parallel/layout.h"

namespace spmd {

struct InspectTextOptions {
  std::vector<std::string> show_params;  // --show: draw these parameters' blocks
  bool all_rows = false;                 // --all: one row per parameter, repeated blocks unfolded
  std::optional<int64_t> device_bytes;   // --device-memory: judge the fit against it
};

// The memory summary and its verdict first, then the mesh, the batch and the parameter table.
std::string inspect_text(const Config& config, const ModelLayout& layout, const InspectTextOptions& options);
nlohmann::json inspect_json(const Config& config, const ModelLayout& layout);

}  // namespace spmd
