// spmd-inspect: shows how a GPT-2 would be laid out over the configured mesh, before any compute.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "config/config.h"
#include "inspect/memory_verdict.h"
#include "inspect/report.h"
#include "parallel/layout.h"
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
};

constexpr const char* kExamples = R"(
Examples:
  spmd-inspect --config configs/gpt2-124m.yaml --device-memory 80GiB
      memory per device and whether it fits, then one row per repeated parameter
  spmd-inspect --config configs/default.yaml --set mesh.shape=[1,4] --show h.0.mlp.c_fc.weight
      try another mesh without editing the file, and draw one parameter's blocks
  spmd-inspect --config configs/fsdp-8.yaml --json --all
      every parameter's spec and shard shape as JSON, for scripts
)";

void setup_inspect(CLI::App& app, InspectOptions& opt) {
  app.add_option("-c,--config", opt.config_path, "YAML config file")->required();
  app.add_option("--set", opt.overrides, "override a key: dotted.key=YAML_VALUE (repeatable)");
  app.add_option("--show", opt.show, "draw the block layout of a 1-D/2-D parameter (repeatable)");
  app.add_flag("--json", opt.json, "print one JSON object instead of text (it lists every parameter)");
  app.add_flag("--all", opt.all, "one table row per parameter (default: repeated blocks folded, h.{0..11}.x)");
  app.add_option("--device-memory", opt.device_memory, "judge the fit against this much memory per device, e.g. 80GiB");
  app.footer(kExamples);
}

int run_inspect(const InspectOptions& opt) {
  spmd::Config config = spmd::load_config(opt.config_path, opt.overrides);
  spmd::ModelLayout layout = spmd::plan_layout(config);
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
    return run_inspect(opt);
  });
}
