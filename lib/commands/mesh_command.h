// What `spmd-train sample` and `spmd-train eval` share: they run one worker per device of the
// checkpoint's mesh and print rank 0's result alone on stdout. The workers write the result to a
// file named by the command's result flag; unless the user named one, the launcher gives them a
// temporary one and prints it whole once they all succeeded. Their logs go to stderr.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "comm/communicator.h"
#include "config/config.h"

namespace spmd {

// The options both commands take besides their own.
struct MeshCommandCli {
  std::string config_path;  // "" : the checkpoint's own config
  std::vector<std::string> overrides;
  int nproc = 0;            // 0: the mesh's size
};

// -c/--config (its help: `config_help`), --set and --nproc.
void add_mesh_command_options(CLI::App& app, MeshCommandCli& cli, const std::string& config_help);

// A checkpoint.dir stands for its newest complete checkpoint; anything else is kept as given.
std::string newest_checkpoint_if_dir(const std::string& path);

struct MeshCommand {
  std::string name;         // "sample": names the temporary result file
  std::string activity;     // "sampling": in the --nproc error
  std::string result_flag;  // "--text-out"
  std::string result_path;  // the user's result file; "": stdout
  std::function<void()> check_inputs;  // in the launcher, once, before any process starts
  // One worker (its threads already set); single_process: this process alone, no launcher.
  std::function<int(const RendezvousInfo& rendezvous, bool single_process)> run_worker;
};

// As a worker where a launcher (ours or an external one) started this process; on a mesh of one,
// the worker in this process; else one worker per device of config's mesh, each started as `argv`
// (this process's whole command line).
int run_mesh_command(const Config& config, const MeshCommandCli& cli, const MeshCommand& command,
                     const std::vector<std::string>& argv);

}  // namespace spmd
