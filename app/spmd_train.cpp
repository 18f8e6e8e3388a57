// spmd-train: trains GPT-2 on the mesh a YAML file declares. Without RANK in the environment it
// launches one worker per local rank; with the torchrun variables it is that one rank.
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "ckpt/export.h"
#include "ckpt/hf_import.h"
#include "comm/backend.h"
#include "config/config.h"
#include "parallel/layout.h"
#include "train/launcher.h"
#include "train/output_dirs.h"
#include "train/stop_signal.h"
#include "train/trainer.h"
#include "util/caching_cpu_allocator.h"
#include "util/error.h"
#include "util/guarded_main.h"
#include "util/test_hooks.h"

namespace {

struct ExportOptions {
  std::string checkpoint;
  std::string out;
};

void setup_export(CLI::App& app, ExportOptions& opt) {
  app.add_option("--checkpoint", opt.checkpoint, "a checkpoint step directory (…/step_00000500)")->required();
  app.add_option("--out", opt.out, "the safetensors file to write")->required();
}

int run_export(const ExportOptions& opt) {
  int n = spmd::export_hf_gpt2(opt.checkpoint, opt.out);
  fmt::print("wrote {} tensors with Hugging Face GPT-2 names to {}\n", n, opt.out);
  return 0;
}

struct TrainCliOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  int nproc = 0;  // 0: the mesh's size / nnodes
  spmd::LaunchOptions launch;
  spmd::TrainOptions train;
};

void setup_train(CLI::App& app, TrainCliOptions& opt) {
  app.add_option("-c,--config", opt.config_path, "YAML config file (required unless a subcommand is given)");
  app.add_option("--set", opt.overrides, "override a key: dotted.key=YAML_VALUE (repeatable)");
  app.add_option("--nproc", opt.nproc, "worker processes on this node (default: mesh size / nnodes)")
      ->check(CLI::PositiveNumber);
  app.add_option("--nnodes", opt.launch.nnodes, "number of nodes")->check(CLI::PositiveNumber);
  app.add_option("--node-rank", opt.launch.node_rank, "this node's index")->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", opt.launch.master_addr, "address of rank 0's node");
  app.add_option("--master-port", opt.launch.master_port, "rendezvous port (default: a free one)")
      ->check(CLI::Range(0, 65535));
  app.add_flag("--verbose", opt.launch.verbose, "forward every rank's output, prefixed [rank r]");
  app.add_option("--resume", opt.train.resume_path,
                 "continue from a checkpoint: PATH, or the newest in checkpoint.dir when given no value")
      ->expected(0, 1);
}

// One training process: its threads, the caching allocator (large activations are reused from
// step to step instead of being mapped and faulted in afresh; bench/NOTES.md), stop handlers.
int run_worker(const spmd::Config& config, const spmd::RendezvousInfo& rendezvous, const spmd::TrainOptions& train,
               int local_ranks) {
  at::set_num_threads(config.runtime.threads_per_rank > 0 ? static_cast<int>(config.runtime.threads_per_rank)
                                                          : spmd::default_threads_per_rank(local_ranks));
  spmd::install_caching_cpu_allocator();
  spmd::install_stop_handlers();
  return spmd::run_training(config, rendezvous, train);
}

int run_train(TrainCliOptions& opt, const std::vector<std::string>& argv) {
  spmd::Config config = spmd::load_config(opt.config_path, opt.overrides);
  spmd::ModelLayout layout = spmd::plan_layout(config);  // layout errors before any process starts
  spmd::resolve_runtime(config.runtime);  // cuda/nccl where they cannot run: exit 2 before any process starts
  spmd::test_hooks();                     // a malformed SPMD_TEST_HOOKS, likewise
  if (!opt.train.resume) spmd::check_hf_checkpoint(config);  // train.init_from against model.*, likewise
  const int mesh_size = static_cast<int>(layout.mesh.size());

  spmd::RendezvousInfo rendezvous;
  rendezvous.timeout_s = config.runtime.timeout_s;
  if (spmd::rendezvous_from_env(rendezvous)) {  // a worker: ours or torchrun's
    SPMD_CHECK(rendezvous.world_size == mesh_size, "WORLD_SIZE={} but mesh {} has {} devices", rendezvous.world_size,
               layout.mesh.describe(), mesh_size);
    if (rendezvous.rank == 0) spmd::check_output_dirs(config);
    return run_worker(config, rendezvous, opt.train, rendezvous.local_world_size);
  }
  int nproc = opt.nproc > 0 ? opt.nproc : mesh_size / opt.launch.nnodes;
  SPMD_CHECK(nproc * opt.launch.nnodes == mesh_size,
             "--nproc {} x --nnodes {} = {} processes, but mesh {} has {} devices; change mesh.shape or --nproc",
             nproc, opt.launch.nnodes, nproc * opt.launch.nnodes, layout.mesh.describe(), mesh_size);
  SPMD_CHECK(opt.launch.node_rank < opt.launch.nnodes, "--node-rank {} must be below --nnodes {}",
             opt.launch.node_rank, opt.launch.nnodes);
  if (mesh_size == 1) {  // one process: no rendezvous needed
    opt.train.single_process = true;
    spmd::check_output_dirs(config);
    return run_worker(config, rendezvous, opt.train, 1);
  }
  if (opt.launch.node_rank == 0) spmd::check_output_dirs(config);  // before any process starts
  opt.launch.nproc_per_node = nproc;
  opt.launch.threads_per_rank = static_cast<int>(config.runtime.threads_per_rank);
  return spmd::launch_workers(opt.launch, argv);
}

}  // namespace

int main(int argc, char** argv) {
  return spmd::guarded_main(std::getenv("RANK") ? fmt::format("spmd-train[rank {}]", std::getenv("RANK")) : "spmd-train", [&] {
    CLI::App app{"spmd-train: GPT-2 training over a named device mesh"};
    TrainCliOptions opt;
    setup_train(app, opt);
    ExportOptions export_opt;
    CLI::App* export_cmd = app.add_subcommand("export", "write a checkpoint as one Hugging Face GPT-2 safetensors file");
    setup_export(*export_cmd, export_opt);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      int code = app.exit(e);
      return code == 0 ? 0 : 2;
    }
    if (export_cmd->parsed()) return run_export(export_opt);
    if (opt.config_path.empty()) {
      fmt::print(stderr, "spmd-train: error: --config is required\n{}", app.help());
      return 2;
    }
    opt.train.resume = app.get_option("--resume")->count() > 0;
    return run_train(opt, std::vector<std::string>(argv, argv + argc));
  });
}
