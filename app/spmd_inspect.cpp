// spmd-inspect: shows how a GPT-2 would be laid out over the configured mesh, before any compute.
#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "config/config.h"
#include "inspect/memory_verdict.h"
#include "inspect/report.h"
#include "parallel/layout.h"
#include "commands/calibrate_command.h"
#include "commands/data_order_command.h"
#include "plan/plan_report.h"
#include "plan/planner.h"
#include "util/error.h"
#include "util/guarded_main.h"

namespace {

struct InspectOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::vector<std::string> show;
  bool json = false;
  bool all = false;
  std::string device_memory;
  double expert_load = 1;
  // The layout planner (docs/planner.md).
  bool plan = false;
  bool calibrate = false;
  std::vector<int64_t> devices;  // --plan: one count ranks its layouts; several answer "how many do I need?"
  std::string memory_per_device;
  size_t top = 10;
  int64_t emit = 0;
  std::string rates_path = "machine-rates.json";
  // The samples steps read (docs/data-blends.md).
  bool data_order = false;
  std::string steps = "1";
};

constexpr const char* kExamples = R"(
Examples:
  spmd-inspect --config configs/gpt2-124m.yaml --device-memory 80GiB
      memory per device and whether it fits, then one row per repeated parameter
  spmd-inspect --config configs/default.yaml --set mesh.shape=[1,4] --show h.0.mlp.c_fc.weight
      try another mesh without editing the file, and draw one parameter's blocks
  spmd-inspect --config configs/fsdp-8.yaml --json --all
      every parameter's spec and shard shape as JSON, for scripts
  spmd-inspect --config configs/default.yaml --calibrate --devices 4
      measure this machine's matmul, memory and collective rates on 4 processes (machine-rates.json)
  spmd-inspect --config configs/default.yaml --plan --devices 4 --memory-per-device 1GiB
      every valid mesh and rule set for 4 devices that fits, ranked by predicted step time
  spmd-inspect --config configs/default.yaml --data-order --steps 1:2
      the samples steps 1 and 2 read: step, row, source and index in the source's own order
  spmd-inspect --config configs/default.yaml --plan --devices 4 --emit 1 > best.yaml
      the fastest plan's complete config, which spmd-train runs unchanged
)";

void setup_inspect(CLI::App& app, InspectOptions& opt) {
  app.add_option("-c,--config", opt.config_path, "YAML config file")->required();
  app.add_option("--set", opt.overrides, "override a key: dotted.key=YAML_VALUE (repeatable)");
  app.add_option("--show", opt.show, "draw the block layout of a 1-D/2-D parameter (repeatable)");
  app.add_flag("--json", opt.json, "print one JSON object instead of text (it lists every parameter)");
  app.add_flag("--all", opt.all, "one table row per parameter (default: repeated blocks folded, h.{0..11}.x)");
  app.add_option("--device-memory", opt.device_memory, "judge the fit against this much memory per device, e.g. 80GiB");
  app.add_option("--expert-load", opt.expert_load,
                 "size routed experts' activations for a device whose experts each get up to this many times their "
                 "mean rows (metrics.jsonl's experts/layerL/device_load_max_over_mean; default 1: balanced)")
      ->check(CLI::Range(1.0, 1e6));
  auto* plan = app.add_flag("--plan", opt.plan, "rank every valid layout for --devices by predicted step time");
  auto* calibrate = app.add_flag("--calibrate", opt.calibrate, "measure this machine's rates for --plan on --devices processes");
  plan->excludes(calibrate);
  app.add_option("--devices", opt.devices, "devices to plan or calibrate for; --plan takes a list (1,2,4,8): the best per count")
      ->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--memory-per-device", opt.memory_per_device, "--plan: keep the layouts that fit, e.g. 24GiB")->needs(plan);
  app.add_option("--top", opt.top, "--plan: rows to show (default 10)")->check(CLI::PositiveNumber)->needs(plan);
  app.add_option("--emit", opt.emit, "--plan: print the config of the plan of this rank instead of the table")
      ->check(CLI::PositiveNumber)->needs(plan);
  app.add_option("--rates", opt.rates_path, "machine rates JSON: written by --calibrate, read by --plan (default machine-rates.json)");
  auto* order = app.add_flag("--data-order", opt.data_order,
                              "print the samples --steps read: step, row, source, index within the source");
  order->excludes(plan)->excludes(calibrate);
  app.add_option("--steps", opt.steps, "--data-order: steps A:B, numbered from 1, B included (default 1)")->needs(order);
  app.footer(kExamples);
}

spmd::MachineRates read_rates(const spmd::Config& config, const InspectOptions& opt) {
  SPMD_CHECK(std::filesystem::exists(opt.rates_path),
             "--rates {}: no such file; measure this machine with spmd-inspect --config {} --calibrate --devices {} "
             "--rates {}, or write one for your cluster (docs/planner.md)",
             opt.rates_path, config.source_path, opt.devices.back(), opt.rates_path);
  return spmd::read_machine_rates(opt.rates_path);
}

// Several device counts: the fastest fitting layout of each.
int run_device_sweep(const spmd::Config& config, const InspectOptions& opt, const spmd::MachineRates& rates,
                     std::optional<int64_t> budget) {
  SPMD_CHECK(opt.emit == 0, "--emit {} needs one --devices count, got {}", opt.emit, opt.devices.size());
  std::vector<spmd::DeviceCountAnswer> answers;
  for (int64_t n : opt.devices) {
    const spmd::PlanRequest request{n, budget, opt.expert_load};
    answers.push_back({request, spmd::search_plans(config, request, rates)});
  }
  if (opt.json) fmt::print("{}\n", spmd::devices_json(answers, rates).dump(2));
  else fmt::print("{}", spmd::devices_table(answers, rates));
  return 0;
}

int run_plan(const spmd::Config& config, const InspectOptions& opt) {
  const spmd::MachineRates rates = read_rates(config, opt);
  std::optional<int64_t> budget;
  if (!opt.memory_per_device.empty()) budget = spmd::parse_byte_size(opt.memory_per_device, "--memory-per-device");
  if (opt.devices.size() > 1) return run_device_sweep(config, opt, rates, budget);
  const spmd::PlanRequest request{opt.devices.front(), budget, opt.expert_load};
  const std::vector<spmd::RankedPlan> plans = spmd::rank_plans(config, request, rates);
  if (opt.emit > 0) fmt::print("{}", spmd::emit_plan(plans, opt.emit));
  else if (opt.json) fmt::print("{}\n", spmd::plans_json(plans, opt.top, request, rates).dump(2));
  else fmt::print("{}", spmd::plan_table(plans, opt.top, request, rates));
  return 0;
}

int run_inspect(const InspectOptions& opt, const std::vector<std::string>& argv) {
  spmd::Config config = spmd::load_config(opt.config_path, opt.overrides);
  SPMD_CHECK(!(opt.plan || opt.calibrate) || !opt.devices.empty(), "--{} needs --devices N", opt.plan ? "plan" : "calibrate");
  if (opt.plan) return run_plan(config, opt);
  if (opt.data_order) {
    spmd::print_data_order(config, spmd::parse_step_range(opt.steps), opt.json);
    return 0;
  }
  if (opt.calibrate) {
    SPMD_CHECK(opt.devices.size() == 1, "--calibrate measures one device count; got --devices with {}", opt.devices.size());
    return spmd::run_calibrate(config, {opt.devices.front(), opt.rates_path}, argv);
  }
  spmd::ModelLayout layout = spmd::plan_layout(config);
  layout.expert_load = opt.expert_load;
  spmd::InspectTextOptions text{opt.show, opt.all, std::nullopt};
  if (!opt.device_memory.empty()) text.device_bytes = spmd::parse_byte_size(opt.device_memory, "--device-memory");
  if (opt.json) fmt::print("{}\n", spmd::inspect_json(config, layout).dump(2));
  else fmt::print("{}", spmd::inspect_text(config, layout, text));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return spmd::guarded_main("spmd-inspect", [&] {
    CLI::App app{"spmd-inspect: the layout of a GPT-2 over a device mesh, per device"};
    InspectOptions opt;
    setup_inspect(app, opt);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      int code = app.exit(e);
      return code == 0 ? 0 : 2;
    }
    return run_inspect(opt, std::vector<std::string>(argv, argv + argc));
  });
}
