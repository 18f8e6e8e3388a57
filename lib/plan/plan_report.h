// What `spmd-inspect --plan` prints: a ranked table for people, JSON for programs.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/planner.h"

namespace spmd {

// The first `top` plans as a table (rank, mesh, axes, what is sharded, memory per device,
// predicted step time, tokens/s, the dominant cost), under a header naming the rates' file.
std::string plan_table(const std::vector<RankedPlan>& plans, size_t top, const PlanRequest& request,
                       const MachineRates& rates);

// The first `top` plans; each with its rank (1-based), choice, memory terms, cost terms and YAML.
nlohmann::json plans_json(const std::vector<RankedPlan>& plans, size_t top, const PlanRequest& request,
                          const MachineRates& rates);

// "How many devices do I need?": for each device count its fastest fitting layout, or the smallest
// footprint when none fits; then the fewest devices that fit.
struct DeviceCountAnswer {
  PlanRequest request;
  PlanSearch search;
};
std::string devices_table(const std::vector<DeviceCountAnswer>& answers, const MachineRates& rates);
nlohmann::json devices_json(const std::vector<DeviceCountAnswer>& answers, const MachineRates& rates);

// The YAML config of plan `rank` (1-based); UsageError naming --emit when out of range.
std::string emit_plan(const std::vector<RankedPlan>& plans, int64_t rank);

}  // namespace spmd
