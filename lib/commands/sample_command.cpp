// Parsing and launching `spmd-train sample`.
#include "commands/sample_command.h"

namespace spmd {

void setup_sample(CLI::App& app, SampleCli& cli) {
  auto& g = cli.options.generate;
  app.add_option("--checkpoint", cli.options.checkpoint, "a checkpoint (…/step_00001000), or a checkpoint.dir: its newest")->required();
  add_mesh_command_options(app, cli, "YAML config (default: the one the checkpoint was written with)");
  auto* prompt = app.add_option("--prompt", cli.options.prompt, "text to continue (default: a newline, not printed)");
  app.add_option("--chat", cli.options.chat,
                 "a user message: the chat template of the fine-tuning data (spmd-prepare --format chat) is applied "
                 "and the assistant's reply printed, up to its end-of-turn token")
      ->excludes(prompt);
  app.add_option("--tokens", g.tokens, "new tokens to generate")->capture_default_str();
  app.add_option("--temperature", g.sampling.temperature, "softmax temperature; 0: greedy")->capture_default_str();
  app.add_option("--top-k", g.sampling.top_k, "sample among the k most likely tokens; 0: all")->capture_default_str();
  app.add_option("--seed", g.sampling.seed, "the text is a function of (seed, position)")->capture_default_str();
  app.add_flag("--no-cache", cli.no_cache, "recompute the whole context for every token (no KV cache)");
  app.add_option("--text-out", cli.options.text_out, "write the text to this file instead of stdout");
}

int run_sample(SampleCli& cli, const std::vector<std::string>& argv) {
  cli.options.generate.use_cache = !cli.no_cache;
  cli.options.checkpoint = newest_checkpoint_if_dir(cli.options.checkpoint);
  const Config config = sampling_config(cli.options.checkpoint, cli.config_path, cli.overrides);
  MeshCommand command{"sample", "sampling", "--text-out", cli.options.text_out,
                      [&] { check_sampling_inputs(config, cli.options); },
                      [&](const RendezvousInfo& rendezvous, bool single_process) {
                        return run_sampling(config, rendezvous, single_process, cli.options);
                      }};
  return run_mesh_command(config, cli, command, argv);
}

}  // namespace spmd
