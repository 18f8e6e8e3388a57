#include "commands/mesh_command.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "ckpt/checkpoint_format.h"
#include "comm/backend.h"
#include "comm/launch_env.h"
#include "launch/launcher.h"
#include "launch/preflight_ranks.h"  // mark_launched_workers
#include "parallel/layout.h"
#include "util/error.h"

namespace spmd {

namespace {

int run_worker(const Config& config, const MeshCommand& command, const RendezvousInfo& rendezvous,
               bool single_process) {
  at::set_num_threads(threads_per_rank(config.runtime.threads_per_rank, rendezvous.local_world_size));
  return command.run_worker(rendezvous, single_process);
}

// The workers write the result to the user's file, or to a temporary one printed here.
int launch_to_stdout(const Config& config, int nproc, const std::vector<std::string>& argv,
                     const MeshCommand& command) {
  const bool to_stdout = command.result_path.empty();  // else `argv` already names the file
  const std::string result_file =
      (std::filesystem::temp_directory_path() / fmt::format("spmd-{}-{}.txt", command.name, getpid())).string();
  std::vector<std::string> worker_argv = argv;
  if (to_stdout) worker_argv.insert(worker_argv.end(), {command.result_flag, result_file});
  LaunchOptions launch;
  launch.nproc_per_node = nproc;
  launch.threads_per_rank = static_cast<int>(config.runtime.threads_per_rank);
  launch.output_to_stderr = true;  // stdout is the result alone
  mark_launched_workers();
  const int code = launch_workers(launch, worker_argv);
  if (to_stdout && code == 0) {
    std::ifstream in(result_file, std::ios::binary);
    std::cout << in.rdbuf() << std::flush;
  }
  std::filesystem::remove(result_file);
  return code;
}

}  // namespace

void add_mesh_command_options(CLI::App& app, MeshCommandCli& cli, const std::string& config_help) {
  app.add_option("-c,--config", cli.config_path, config_help);
  app.add_option("--set", cli.overrides, "override a key: dotted.key=YAML_VALUE (e.g. mesh.shape=[2,2])");
  app.add_option("--nproc", cli.nproc, "worker processes (must equal the mesh's size)")->check(CLI::PositiveNumber);
}

std::string newest_checkpoint_if_dir(const std::string& path) {
  if (path.empty() || std::filesystem::exists(path + "/index.json")) return path;
  if (auto latest = find_latest_checkpoint(path)) return *latest;
  return path;
}

int run_mesh_command(const Config& config, const MeshCommandCli& cli, const MeshCommand& command,
                     const std::vector<std::string>& argv) {
  const ModelLayout layout = plan_layout(config);
  resolve_runtime(config.runtime);
  const int mesh_size = static_cast<int>(layout.mesh.size());
  if (auto launched = detect_launch_env(current_environment())) {  // a worker: ours, or an external launcher's
    SPMD_CHECK(launched->rendezvous.world_size == mesh_size, "{}={} but mesh {} has {} devices",
               launched->world_size_variable, launched->rendezvous.world_size, layout.mesh.describe(), mesh_size);
    return run_worker(config, command, rendezvous_info(launched->rendezvous, config.runtime.timeout_s), false);
  }
  command.check_inputs();  // once, before any process starts
  SPMD_CHECK(cli.nproc == 0 || cli.nproc == mesh_size,
             "--nproc {}: {} runs one process per device of mesh {} ({}); change mesh.shape with --set", cli.nproc,
             command.activity, layout.mesh.describe(), mesh_size);
  if (mesh_size == 1) return run_worker(config, command, RendezvousInfo{}, true);
  return launch_to_stdout(config, mesh_size, argv, command);
}

}  // namespace spmd
