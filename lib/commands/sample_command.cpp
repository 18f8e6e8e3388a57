// Parsing and launching `spmd-train sample`.
#include "commands/sample_command.h"


#include <cstdio>
#include <filesystem>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "ckpt/checkpoint_format.h"
#include "commands/launch_to_stdout.h"
#include "comm/backend.h"
#include "comm/launch_env.h"
#include "parallel/layout.h"
#include "launch/launcher.h"
#include "launch/preflight_ranks.h"
#include "util/error.h"

namespace spmd {

void setup_sample(CLI::App& app, SampleCli& cli) {
  auto& g = cli.options.generate;
  app.add_option("--checkpoint", cli.options.checkpoint, "a checkpoint (…/step_00001000), or a checkpoint.dir: its newest")->required();
  app.add_option("-c,--config", cli.config_path, "YAML config (default: the one the checkpoint was written with)");
  app.add_option("--set", cli.overrides, "override a key: dotted.key=YAML_VALUE (e.g. mesh.shape=[2,2])");
  app.add_option("--nproc", cli.nproc, "worker processes (must equal the mesh's size)")->check(CLI::PositiveNumber);
  app.add_option("--prompt", cli.options.prompt, "text to continue (default: a newline, not printed)");
  app.add_option("--tokens", g.tokens, "new tokens to generate")->capture_default_str();
  app.add_option("--temperature", g.sampling.temperature, "softmax temperature; 0: greedy")->capture_default_str();
  app.add_option("--top-k", g.sampling.top_k, "sample among the k most likely tokens; 0: all")->capture_default_str();
  app.add_option("--seed", g.sampling.seed, "the text is a function of (seed, position)")->capture_default_str();
  app.add_flag("--no-cache", cli.no_cache, "recompute the whole context for every token (no KV cache)");
  app.add_option("--text-out", cli.options.text_out, "write the text to this file instead of stdout");
}

namespace {
int run_sample_worker(const Config& config, const RendezvousInfo& rendezvous, bool single_process,
                      const SampleOptions& options, int local_ranks) {
  at::set_num_threads(config.runtime.threads_per_rank > 0 ? static_cast<int>(config.runtime.threads_per_rank)
                                                          : default_threads_per_rank(local_ranks));
  return run_sampling(config, rendezvous, single_process, options);
}

}  // namespace

int run_sample(SampleCli& cli, const std::vector<std::string>& argv) {
  cli.options.generate.use_cache = !cli.no_cache;
  // A checkpoint.dir stands for its newest complete checkpoint.
  if (!std::filesystem::exists(cli.options.checkpoint + "/index.json"))
    if (auto latest = find_latest_checkpoint(cli.options.checkpoint)) cli.options.checkpoint = *latest;
  const Config config = sampling_config(cli.options.checkpoint, cli.config_path, cli.overrides);
  const ModelLayout layout = plan_layout(config);
  resolve_runtime(config.runtime);
  const int mesh_size = static_cast<int>(layout.mesh.size());
  if (auto launched = detect_launch_env(current_environment())) {  // a worker: ours, or an external launcher's
    SPMD_CHECK(launched->rendezvous.world_size == mesh_size, "{}={} but mesh {} has {} devices",
               launched->world_size_variable, launched->rendezvous.world_size, layout.mesh.describe(), mesh_size);
    const RendezvousInfo rendezvous = rendezvous_info(launched->rendezvous, config.runtime.timeout_s);
    return run_sample_worker(config, rendezvous, false, cli.options, rendezvous.local_world_size);
  }
  check_sampling_inputs(config, cli.options);  // once, before any process starts
  SPMD_CHECK(cli.nproc == 0 || cli.nproc == mesh_size,
             "--nproc {}: sampling runs one process per device of mesh {} ({}); change mesh.shape with --set", cli.nproc,
             layout.mesh.describe(), mesh_size);
  if (mesh_size == 1) return run_sample_worker(config, RendezvousInfo{}, true, cli.options, 1);
  return launch_to_stdout(config, mesh_size, argv, cli.options.text_out.empty(), "--text-out", "sample");
}

}  // namespace spmd
