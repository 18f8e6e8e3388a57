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
RankedPlan evaluate(PlanCandidate candidate, const MachineRates& rates, double expert_load) {
  candidate.layout.expert_load = expert_load;
  const std::vector<MemoryEstimate> stages = estimate_stages(candidate.layout, candidate.config);
  candidate.layout.expert_load = 1;  // the predicted time stays balanced, its memory traffic included
  const int64_t fullest = fullest_stage(stages);
  RankedPlan plan{candidate.choice, std::move(candidate.config), std::move(candidate.layout),
                  stages[static_cast<size_t>(fullest)], {}};
  plan.cost = predict_step(plan.config, plan.layout, stages, rates);
  return plan;
}

[[noreturn]] void nothing_fits(const PlanSearch& search, const PlanRequest& request) {
  const RankedPlan& smallest = *search.smallest;
  throw UsageError(fmt::format(
      "--memory-per-device {}: none of the {} valid layouts on {} devices fits; the smallest footprint is {} per "
      "device ({}, mesh {}); give more memory or more --devices, or shrink data.batch_size or the model",
      human_bytes(*request.memory_per_device), search.valid, request.devices, human_bytes(smallest.footprint()),
      describe_choice(smallest.choice), smallest.layout.mesh.describe()));
}
}  // namespace

PlanSearch search_plans(const Config& base, const PlanRequest& request, const MachineRates& rates) {
  PlanSearch search;
  for (auto& candidate : enumerate_plans(base, request.devices)) {
    RankedPlan plan = evaluate(std::move(candidate), rates, request.expert_load);
    ++search.valid;
    if (!search.smallest || plan.footprint() < search.smallest->footprint()) search.smallest = plan;
    if (!request.memory_per_device || plan.footprint() <= *request.memory_per_device)
      search.fitting.push_back(std::move(plan));
  }
  std::stable_sort(search.fitting.begin(), search.fitting.end(), [](const RankedPlan& a, const RankedPlan& b) {
    if (a.cost.total_s != b.cost.total_s) return a.cost.total_s < b.cost.total_s;
    return a.footprint() < b.footprint();
  });
  return search;
}

std::vector<RankedPlan> rank_plans(const Config& base, const PlanRequest& request, const MachineRates& rates) {
  PlanSearch search = search_plans(base, request, rates);
  SPMD_CHECK(search.valid > 0,
             "--devices {}: no layout of this model divides over {} devices (data.batch_size = {}, model.n_head = {}, "
             "model.n_layer = {}, model.n_embd = {}); try a device count that divides them",
             request.devices, request.devices, base.data.batch_size, base.model.n_head, base.model.n_layer,
             base.model.n_embd);
  if (search.fitting.empty()) nothing_fits(search, request);
  return std::move(search.fitting);
}

}  // namespace spmd
