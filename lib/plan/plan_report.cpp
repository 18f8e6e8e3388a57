// Rendering ranked plans.
#include "plan/plan_report.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "inspect/text_table.h"
#include "mesh/render.h"
#include "util/error.h"

namespace spmd {

namespace {
std::string shape_text(const MeshConfig& m) { return fmt::format("[{}]", fmt::join(m.shape, ",")); }
std::string axes_text(const MeshConfig& m) { return fmt::format("[{}]", fmt::join(m.axes, ",")); }

std::string header(const std::vector<RankedPlan>& plans, size_t shown, const PlanRequest& request,
                   const MachineRates& rates) {
  std::string budget = request.memory_per_device ? fmt::format(" fitting {} per device", human_bytes(*request.memory_per_device))
                                                 : std::string();
  return fmt::format("{} layouts on {} devices{}; the fastest {} by predicted step time (rates: {})\n", plans.size(),
                     request.devices, budget, shown, rates.source);
}
}  // namespace

std::string plan_table(const std::vector<RankedPlan>& plans, size_t top, const PlanRequest& request,
                       const MachineRates& rates) {
  const size_t shown = std::min(top, plans.size());
  std::vector<std::vector<std::string>> rows{
      {"#", "mesh", "axes", "sharding", "memory/device", "step ms", "tokens/s", "dominant cost"}};
  for (size_t i = 0; i < shown; ++i) {
    const RankedPlan& p = plans[i];
    rows.push_back({std::to_string(i + 1), shape_text(p.config.mesh), axes_text(p.config.mesh), describe_choice(p.choice),
                    human_bytes(p.footprint()), fmt::format("{:.1f}", p.cost.total_s * 1e3),
                    fmt::format("{:.0f}", p.tokens_per_s()), p.cost.dominant()});
  }
  return header(plans, shown, request, rates) + text_table(rows, "rllllrrl", "  ") +
         "spmd-inspect ... --emit RANK prints that plan's config; spmd-train runs it unchanged.\n";
}

nlohmann::json plans_json(const std::vector<RankedPlan>& plans, size_t top, const PlanRequest& request,
                          const MachineRates& rates) {
  nlohmann::json out{{"devices", request.devices}, {"valid_fitting", plans.size()}, {"rates", machine_rates_json(rates)}};
  if (request.memory_per_device) out["memory_per_device"] = *request.memory_per_device;
  out["plans"] = nlohmann::json::array();
  for (size_t i = 0; i < std::min(top, plans.size()); ++i) {
    const RankedPlan& p = plans[i];
    const PlanChoice& c = p.choice;
    nlohmann::json cost{{"total_s", p.cost.total_s}, {"compute_s", p.cost.compute_s}, {"memory_s", p.cost.memory_s},
                        {"bubble_s", p.cost.bubble_s}, {"flops", p.cost.flops}, {"dominant", p.cost.dominant()},
                        {"comm_s", p.cost.comm_s}, {"all_to_all_bytes", p.cost.all_to_all_bytes}};
    out["plans"].push_back({{"rank", i + 1},
                            {"mesh", {{"shape", p.config.mesh.shape}, {"axes", p.config.mesh.axes}}},
                            {"sharding", describe_choice(c)},
                            {"data", c.data}, {"fsdp", c.fsdp}, {"context", c.context}, {"model", c.model},
                            {"stage", c.stage}, {"expert", c.expert}, {"experts_on", experts_on(c)},
                            {"sequence_parallel", c.sequence_parallel}, {"microbatches", c.microbatches},
                            {"schedule", name_of(c.schedule)}, {"remat", name_of(c.remat)},
                            {"context_exchange", name_of(c.context_exchange)},
                            {"memory_bytes", p.footprint()},
                            {"memory", {{"params", p.memory.params}, {"grads", p.memory.grads},
                                        {"optimizer", p.memory.optimizer}, {"fsdp_gathered", p.memory.fsdp_gathered},
                                        {"gradient_sends", p.memory.gradient_sends},
                                        {"backward_working_set", p.memory.backward_working_set},
                                        {"activations", p.memory.activations}, {"recompute", p.memory.recompute}}},
                            {"step_s", p.cost.total_s}, {"tokens_per_s", p.tokens_per_s()}, {"cost", cost},
                            {"yaml", to_yaml(p.config)}});
  }
  return out;
}

std::string devices_table(const std::vector<DeviceCountAnswer>& answers, const MachineRates& rates) {
  std::vector<std::vector<std::string>> rows{{"devices", "fastest layout that fits", "mesh", "memory/device", "step ms", "tokens/s"}};
  std::optional<int64_t> fewest;
  for (const auto& a : answers) {
    const PlanSearch& s = a.search;
    const std::string n = std::to_string(a.request.devices);
    if (s.fitting.empty()) {
      rows.push_back({n, s.valid == 0 ? "no valid layout (sizes do not divide)"
                                      : fmt::format("none fits; smallest: {}", describe_choice(s.smallest->choice)),
                      s.valid == 0 ? "" : shape_text(s.smallest->config.mesh),
                      s.valid == 0 ? "" : human_bytes(s.smallest->footprint()), "", ""});
      continue;
    }
    const RankedPlan& p = s.fitting.front();
    if (!fewest) fewest = a.request.devices;
    rows.push_back({n, describe_choice(p.choice), shape_text(p.config.mesh), human_bytes(p.footprint()),
                    fmt::format("{:.1f}", p.cost.total_s * 1e3), fmt::format("{:.0f}", p.tokens_per_s())});
  }
  const auto& budget = answers.front().request.memory_per_device;
  std::string text = fmt::format("the fastest layout per device count{} (rates: {})\n",
                                 budget ? fmt::format(" within {} per device", human_bytes(*budget)) : std::string(),
                                 rates.source);
  text += text_table(rows, "rlllrr", "  ");
  text += fewest ? fmt::format("fewest devices that fit: {}; --devices {} --top K ranks its layouts, --emit RANK prints one\n",
                               *fewest, *fewest)
                 : std::string("no device count given fits: more devices, more memory, or a smaller batch or model\n");
  return text;
}

nlohmann::json devices_json(const std::vector<DeviceCountAnswer>& answers, const MachineRates& rates) {
  nlohmann::json out{{"rates", machine_rates_json(rates)}, {"by_devices", nlohmann::json::array()}};
  for (const auto& a : answers) {
    nlohmann::json one = plans_json(a.search.fitting, 1, a.request, rates);
    if (a.search.smallest) one["smallest_memory_bytes"] = a.search.smallest->footprint();
    one["valid"] = a.search.valid;
    out["by_devices"].push_back(one);
  }
  return out;
}

std::string emit_plan(const std::vector<RankedPlan>& plans, int64_t rank) {
  SPMD_CHECK(rank >= 1 && rank <= static_cast<int64_t>(plans.size()), "--emit {}: expected a rank from 1 to {}", rank,
             plans.size());
  const RankedPlan& p = plans[static_cast<size_t>(rank - 1)];
  return fmt::format("# spmd-inspect --plan rank {} of {}: {} on mesh {}; predicted {:.1f} ms/step, {} per device\n{}",
                     rank, plans.size(), describe_choice(p.choice), p.layout.mesh.describe(), p.cost.total_s * 1e3,
                     human_bytes(p.footprint()), to_yaml(p.config));
}

}  // namespace spmd
