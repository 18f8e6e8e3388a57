// `spmd-inspect --plan`: every valid layout for N devices, those that fit the memory budget,
// ranked by predicted step time (fastest first).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "config/config.h"
#include "inspect/memory_estimate.h"
#include "plan/machine_rates.h"
#include "plan/plan_space.h"
#include "plan/step_cost.h"

namespace spmd {

struct RankedPlan {
  PlanChoice choice;
  Config config;        // runs unchanged under spmd-train (to_yaml(config) is --emit's text)
  ModelLayout layout;
  MemoryEstimate memory;  // the fullest stage's (with runtime.remat, the replayed block included)
  StepCost cost;
  int64_t footprint() const { return memory.total(); }  // the budget's measure
  double tokens_per_s() const;
};

struct PlanRequest {
  int64_t devices = 1;
  std::optional<int64_t> memory_per_device;  // bytes; none: every valid layout is kept
  double expert_load = 1;  // the memory estimate's routing (ModelLayout::expert_load); time stays balanced
};

struct PlanSearch {
  size_t valid = 0;                   // layouts the rules engine accepts on that many devices
  std::vector<RankedPlan> fitting;    // those within the budget, fastest first (ties: less memory)
  std::optional<RankedPlan> smallest; // the valid layout with the smallest footprint
};

PlanSearch search_plans(const Config& base, const PlanRequest& request, const MachineRates& rates);

// search_plans' fitting layouts. UsageError (exit 2) when the model has no valid layout on that
// many devices, or when none fits the budget: the message names the smallest footprint found.
std::vector<RankedPlan> rank_plans(const Config& base, const PlanRequest& request, const MachineRates& rates);

}  // namespace spmd
