// Parsing and launching `spmd-train eval`.
#include "commands/eval_command.h"


#include <filesystem>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "ckpt/checkpoint_format.h"
#include "commands/launch_to_stdout.h"
#include "comm/backend.h"
#include "comm/launch_env.h"
#include "launch/launcher.h"
#include "launch/preflight_ranks.h"
#include "parallel/layout.h"
#include "util/error.h"

namespace spmd {

void setup_eval(CLI::App& app, EvalCli& cli) {
  auto& o = cli.options;
  app.add_option("--checkpoint", o.checkpoint, "a checkpoint (…/step_00001000), or a checkpoint.dir: its newest");
  app.add_option("--task", o.task, "multiple-choice examples in HellaSwag's JSON Lines (ctx, endings, label)")->required();
  app.add_option("--limit", o.limit, "score the first K examples; 0: all")->capture_default_str();
  app.add_flag("--json", o.json, "print one JSON object: task, n, acc, acc_norm and every example's per-choice sum and mean");
  app.add_option("-c,--config", cli.config_path,
                 "YAML config (default: the checkpoint's); without --checkpoint its train.init_from is scored");
  app.add_option("--set", cli.overrides, "override a key: dotted.key=YAML_VALUE (e.g. mesh.shape=[2,2])");
  app.add_option("--nproc", cli.nproc, "worker processes (must equal the mesh's size)")->check(CLI::PositiveNumber);
  app.add_option("--result-out", o.result_out, "write the result to this file instead of stdout");
}

namespace {
int run_eval_worker(const Config& config, const RendezvousInfo& rendezvous, bool single_process,
                    const EvalOptions& options, int local_ranks) {
  at::set_num_threads(config.runtime.threads_per_rank > 0 ? static_cast<int>(config.runtime.threads_per_rank)
                                                          : default_threads_per_rank(local_ranks));
  return run_eval(config, rendezvous, single_process, options);
}

}  // namespace

int run_eval_command(EvalCli& cli, const std::vector<std::string>& argv) {
  auto& checkpoint = cli.options.checkpoint;
  // A checkpoint.dir stands for its newest complete checkpoint.
  if (!checkpoint.empty() && !std::filesystem::exists(checkpoint + "/index.json"))
    if (auto latest = find_latest_checkpoint(checkpoint)) checkpoint = *latest;
  const Config config = eval_config(cli.options, cli.config_path, cli.overrides);
  const ModelLayout layout = plan_layout(config);
  resolve_runtime(config.runtime);
  const int mesh_size = static_cast<int>(layout.mesh.size());
  if (auto launched = detect_launch_env(current_environment())) {  // a worker: ours, or an external launcher's
    SPMD_CHECK(launched->rendezvous.world_size == mesh_size, "{}={} but mesh {} has {} devices",
               launched->world_size_variable, launched->rendezvous.world_size, layout.mesh.describe(), mesh_size);
    const RendezvousInfo rendezvous = rendezvous_info(launched->rendezvous, config.runtime.timeout_s);
    return run_eval_worker(config, rendezvous, false, cli.options, rendezvous.local_world_size);
  }
  check_eval_inputs(config, cli.options);  // once, before any process starts
  SPMD_CHECK(cli.nproc == 0 || cli.nproc == mesh_size,
             "--nproc {}: eval runs one process per device of mesh {} ({}); change mesh.shape with --set", cli.nproc,
             layout.mesh.describe(), mesh_size);
  if (mesh_size == 1) return run_eval_worker(config, RendezvousInfo{}, true, cli.options, 1);
  return launch_to_stdout(config, mesh_size, argv, cli.options.result_out.empty(), "--result-out", "eval");
}

}  // namespace spmd
