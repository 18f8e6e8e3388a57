// Ranking: the memory estimate decides what fits, the cost model the order.
#include "plan/planner.h"

#include <algorithm>

#include <fmt/format.h>

#include "mesh/render.h"
#include "util/error.h"

namespace spmd {

double RankedPlan::tokens_per_s() const {
  return static_cast<double>(config.data.batch_size * config.model.block_size) / cost.total_s;
}

namespace {
RankedPlan evaluate(PlanCandidate candidate, const MachineRates& rates) {
  const std::vector<MemoryEstimate> stages = estimate_stages(candidate.layout, candidate.config);
  RankedPlan plan{candidate.choice, std::move(candidate.config), std::move(candidate.layout),
                  stages[static_cast<size_t>(fullest_stage(stages))], {}};
  plan.cost = predict_step(plan.config, plan.layout, stages, rates);
  return plan;
}

[[noreturn]] void nothing_fits(const std::vector<RankedPlan>& all, const PlanRequest& request) {
  const auto smallest = std::min_element(all.begin(), all.end(), [](const RankedPlan& a, const RankedPlan& b) {
    return a.memory.total() < b.memory.total();
  });
  throw UsageError(fmt::format(
      "--memory-per-device {}: none of the {} valid layouts on {} devices fits; the smallest footprint is {} per "
      "device ({}, mesh {}); give more memory or more --devices, or shrink data.batch_size or the model",
      human_bytes(*request.memory_per_device), all.size(), request.devices, human_bytes(smallest->memory.total()),
      describe_choice(smallest->choice), smallest->layout.mesh.describe()));
}
}  // namespace

std::vector<RankedPlan> rank_plans(const Config& base, const PlanRequest& request, const MachineRates& rates) {
  std::vector<PlanCandidate> candidates = enumerate_plans(base, request.devices);
  SPMD_CHECK(!candidates.empty(),
             "--devices {}: no layout of this model divides over {} devices (data.batch_size = {}, model.n_head = {}, "
             "model.n_layer = {}, model.n_embd = {}); try a device count that divides them",
             request.devices, request.devices, base.data.batch_size, base.model.n_head, base.model.n_layer,
             base.model.n_embd);
  std::vector<RankedPlan> all;
  for (auto& c : candidates) all.push_back(evaluate(std::move(c), rates));
  std::vector<RankedPlan> fitting;
  for (auto& p : all)
    if (!request.memory_per_device || p.memory.total() <= *request.memory_per_device) fitting.push_back(p);
  if (fitting.empty()) nothing_fits(all, request);
  std::stable_sort(fitting.begin(), fitting.end(), [](const RankedPlan& a, const RankedPlan& b) {
    if (a.cost.total_s != b.cost.total_s) return a.cost.total_s < b.cost.total_s;
    return a.memory.total() < b.memory.total();
  });
  return fitting;
}

}  // namespace spmd
