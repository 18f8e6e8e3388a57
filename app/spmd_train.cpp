// spmd-train: trains GPT-2 on the mesh a YAML file declares. Started by torchrun, srun or mpirun
// (comm/launch_env.h) it is one rank; otherwise it launches one worker per local rank.
#include <filesystem>

#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "hf/hf_export.h"
#include "comm/backend.h"
#include "comm/launch_env.h"
#include "config/config.h"
#include "parallel/layout.h"
#include "launch/launcher.h"
#include "monitor/loss_plot.h"
#include "launch/preflight.h"
#include "launch/preflight_ranks.h"
#include "launch/restarts.h"
#include "commands/eval_command.h"
#include "commands/sample_command.h"
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
  app.add_option("--out", opt.out,
                 "a new folder for from_pretrained (config.json, model.safetensors, the tokenizer files), or a "
                 "file ending in .safetensors (the weights alone)")
      ->required();
}

int run_export(const ExportOptions& opt) {
  int n = spmd::export_hf(opt.checkpoint, opt.out);
  fmt::print("wrote {} tensors with Hugging Face names to {}\n", n, opt.out);
  return 0;
}

struct PlotOptions {
  std::string metrics;
  std::string out;  // default: loss.svg beside the metrics file
  std::string title;
};

void setup_plot(CLI::App& app, PlotOptions& opt) {
  app.add_option("METRICS", opt.metrics, "a run's metrics.jsonl")->required();
  app.add_option("-o,--out", opt.out, "the SVG file to write (default: loss.svg beside METRICS)");
  app.add_option("--title", opt.title, "chart title (default: the run's directory name)");
}

int run_plot(PlotOptions opt) {
  const std::filesystem::path dir = std::filesystem::absolute(opt.metrics).parent_path();
  if (opt.out.empty()) opt.out = (dir / "loss.svg").string();
  if (opt.title.empty()) opt.title = dir.filename().string();
  const std::filesystem::path out_dir = std::filesystem::absolute(opt.out).parent_path();
  SPMD_CHECK(std::filesystem::is_directory(out_dir), "--out {}: directory {} does not exist", opt.out, out_dir.string());
  spmd::write_loss_plot(opt.metrics, opt.out, opt.title);
  fmt::print("wrote the loss curve of {} to {}\n", opt.metrics, opt.out);
  return 0;
}

struct TrainCliOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  int nproc = 0;  // 0: the mesh's size / nnodes
  int max_restarts = 0;
  spmd::LaunchOptions launch;
  spmd::TrainOptions train;
};

constexpr const char* kExamples = R"(
Examples:
  spmd-train --config configs/default.yaml
      2 worker processes on a [2, 1] (data, model) mesh; one line per logged step
  spmd-train --config configs/default.yaml --set mesh.shape=[2,2] --set train.steps=200
      the same run on 4 processes (data x tensor parallel), shorter, without editing the file
  spmd-train --config configs/default.yaml --resume
      continue from the newest checkpoint in checkpoint.dir
Check a layout and its memory before training: spmd-inspect --config FILE. Config files: configs/README.md.
)";

void setup_train(CLI::App& app, TrainCliOptions& opt) {
  app.footer(kExamples);
  app.add_option("-c,--config", opt.config_path, "YAML config file (required unless a subcommand is given)");
  app.add_option("--set", opt.overrides, "override a key: dotted.key=YAML_VALUE (repeatable)");
  app.add_option("--nproc", opt.nproc, "worker processes on this node (default: mesh size / nnodes)")
      ->check(CLI::PositiveNumber);
  app.add_option("--nnodes", opt.launch.nnodes, "number of nodes")->check(CLI::PositiveNumber);
  app.add_option("--node-rank", opt.launch.node_rank, "this node's index")->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", opt.launch.master_addr, "address of rank 0's node");
  app.add_option("--master-port", opt.launch.master_port, "rendezvous port (default: a free one)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--max-restarts", opt.max_restarts,
                 "restart all workers from the newest checkpoint when one fails, at most N times")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--verbose", opt.launch.verbose, "forward every rank's output, prefixed [rank r]");
  app.add_option("--resume", opt.train.resume_path,
                 "continue from a checkpoint: PATH, or the newest in checkpoint.dir when given no value; "
                 "'auto': the newest if there is one, else from step 0 (for torchrun/Slurm restarts)")
      ->expected(0, 1);
}

// One training process: its threads, the caching allocator (large activations are reused from
// step to step instead of being mapped and faulted in afresh; bench/NOTES.md), stop handlers.
int run_worker(const spmd::Config& config, const spmd::RendezvousInfo& rendezvous, const spmd::TrainOptions& train,
               int local_ranks) {
  at::set_num_threads(spmd::threads_per_rank(config.runtime.threads_per_rank, local_ranks));
  spmd::install_caching_cpu_allocator();
  spmd::install_stop_handlers();
  return spmd::run_training(config, rendezvous, train);
}

// What an external launcher gave, checked against the mesh and the options; rank 0 says what it found.
spmd::RendezvousInfo check_launch_env(const spmd::LaunchEnv& launched, const spmd::Mesh& mesh, int max_restarts,
                                      double timeout_s) {
  spmd::RendezvousInfo r = spmd::rendezvous_info(launched.rendezvous, timeout_s);
  SPMD_CHECK(r.world_size == mesh.size(), "{}={} but mesh {} has {} devices: start {} processes or change mesh.shape",
             launched.world_size_variable, r.world_size, mesh.describe(), mesh.size(), mesh.size());
  SPMD_CHECK(max_restarts == 0 || launched.launcher == "spmd-train",
             "--max-restarts is for spmd-train's own launcher; under {} let it restart the job (exit code 1 means a "
             "restartable failure) and pass --resume auto",
             launched.launcher);
  if (r.rank == 0 && launched.launcher != "spmd-train") fmt::print("{}\n", launched.description);
  return r;
}

int run_train(TrainCliOptions& opt, const std::vector<std::string>& argv) {
  spmd::Config config = spmd::load_config(opt.config_path, opt.overrides);
  spmd::ModelLayout layout = spmd::plan_layout(config);  // layout errors before any process starts
  spmd::resolve_runtime(config.runtime);  // cuda/nccl where they cannot run: exit 2 before any process starts
  spmd::test_hooks();                     // a malformed SPMD_TEST_HOOKS, likewise
  const int mesh_size = static_cast<int>(layout.mesh.size());

  spmd::RendezvousInfo rendezvous;
  rendezvous.timeout_s = config.runtime.timeout_s;
  const spmd::EnvMap env = spmd::current_environment();
  if (auto launched = spmd::detect_launch_env(env)) {  // a worker: ours, torchrun's, srun's or mpirun's
    rendezvous = check_launch_env(*launched, layout.mesh, opt.max_restarts, config.runtime.timeout_s);
    // Our launcher checked the inputs before starting us; under another, rank 0 checks for all.
    if (!spmd::launched_by_spmd_train()) spmd::preflight_across_ranks(config, opt.train, rendezvous);
    return run_worker(config, rendezvous, opt.train, rendezvous.local_world_size);
  }
  int nproc = opt.nproc > 0 ? opt.nproc : mesh_size / opt.launch.nnodes;
  SPMD_CHECK(nproc * opt.launch.nnodes == mesh_size,
             "--nproc {} x --nnodes {} = {} processes, but mesh {} has {} devices; change mesh.shape or --nproc",
             nproc, opt.launch.nnodes, nproc * opt.launch.nnodes, layout.mesh.describe(), mesh_size);
  SPMD_CHECK(opt.launch.node_rank < opt.launch.nnodes, "--node-rank {} must be below --nnodes {}",
             opt.launch.node_rank, opt.launch.nnodes);
  spmd::refuse_shared_gpus(config.runtime, nproc);  // an asked nccl with more ranks here than GPUs: exit 2 now
  if (mesh_size == 1 && opt.max_restarts == 0) {  // one process: no rendezvous needed
    opt.train.single_process = true;
    spmd::preflight_check(config, opt.train);
    return run_worker(config, rendezvous, opt.train, 1);
  }
  spmd::preflight_check(config, opt.train);  // every input, once, before any process starts
  spmd::mark_launched_workers();
  opt.launch.nproc_per_node = nproc;
  opt.launch.threads_per_rank = static_cast<int>(config.runtime.threads_per_rank);
  fmt::print("{}\n", spmd::describe_builtin_launch(env, nproc));
  return spmd::launch_with_restarts(opt.launch, argv, {opt.max_restarts, config.checkpoint.dir});
}

}  // namespace

int main(int argc, char** argv) {
  return spmd::guarded_main(spmd::program_label("spmd-train"), [&] {
    CLI::App app{"spmd-train: GPT-2 training over a named device mesh"};
    TrainCliOptions opt;
    setup_train(app, opt);
    ExportOptions export_opt;
    CLI::App* export_cmd = app.add_subcommand("export", "write a checkpoint as a Hugging Face folder (or one safetensors file)");
    setup_export(*export_cmd, export_opt);
    spmd::SampleCli sample_opt;
    CLI::App* sample_cmd = app.add_subcommand("sample", "print text generated by a checkpoint, on any mesh");
    spmd::setup_sample(*sample_cmd, sample_opt);
    spmd::EvalCli eval_opt;
    CLI::App* eval_cmd = app.add_subcommand("eval", "score a multiple-choice task (HellaSwag's format) with a checkpoint, on any mesh");
    spmd::setup_eval(*eval_cmd, eval_opt);
    PlotOptions plot_opt;
    CLI::App* plot_cmd = app.add_subcommand("plot", "draw a run's train and val loss against step as SVG");
    setup_plot(*plot_cmd, plot_opt);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      int code = app.exit(e);
      return code == 0 ? 0 : 2;
    }
    if (export_cmd->parsed()) return run_export(export_opt);
    if (sample_cmd->parsed()) return spmd::run_sample(sample_opt, std::vector<std::string>(argv, argv + argc));
    if (eval_cmd->parsed()) return spmd::run_eval_command(eval_opt, std::vector<std::string>(argv, argv + argc));
    if (plot_cmd->parsed()) return run_plot(plot_opt);
    if (opt.config_path.empty()) {
      fmt::print(stderr, "spmd-train: error: --config is required\n{}", app.help());
      return 2;
    }
    opt.train.resume = app.get_option("--resume")->count() > 0;
    return run_train(opt, std::vector<std::string>(argv, argv + argc));
  });
}
