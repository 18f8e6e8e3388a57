// Parsing and launching `spmd-train eval`.
#include "commands/eval_command.h"

namespace spmd {

void setup_eval(CLI::App& app, EvalCli& cli) {
  auto& o = cli.options;
  app.add_option("--checkpoint", o.checkpoint, "a checkpoint (…/step_00001000), or a checkpoint.dir: its newest");
  app.add_option("--task", o.task, "multiple-choice examples in HellaSwag's JSON Lines (ctx, endings, label)")->required();
  app.add_option("--limit", o.limit, "score the first K examples; 0: all")->capture_default_str();
  app.add_flag("--json", o.json, "print one JSON object: task, n, acc, acc_norm and every example's per-choice sum and mean");
  add_mesh_command_options(app, cli,
                           "YAML config (default: the checkpoint's); without --checkpoint its train.init_from is scored");
  app.add_option("--result-out", o.result_out, "write the result to this file instead of stdout");
}

int run_eval_command(EvalCli& cli, const std::vector<std::string>& argv) {
  cli.options.checkpoint = newest_checkpoint_if_dir(cli.options.checkpoint);
  const Config config = eval_config(cli.options, cli.config_path, cli.overrides);
  MeshCommand command{"eval", "eval", "--result-out", cli.options.result_out,
                      [&] { check_eval_inputs(config, cli.options); },
                      [&](const RendezvousInfo& rendezvous, bool single_process) {
                        return run_eval(config, rendezvous, single_process, cli.options);
                      }};
  return run_mesh_command(config, cli, command, argv);
}

}  // namespace spmd
