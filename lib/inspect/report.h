// spmd-inspect's report: mesh, per-parameter layout table, memory estimate; text or JSON.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "parallel/layout.h"

namespace spmd {

std::string inspect_text(const Config& config, const ModelLayout& layout,
                         const std::vector<std::string>& show_params);
nlohmann::json inspect_json(const Config& config, const ModelLayout& layout);
nlohmann::json spec_to_json(const PartitionSpec& spec);

}  // namespace spmd
