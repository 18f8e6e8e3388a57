// The `spmd-train sample` subcommand: its options, and the launcher's side (check the inputs
// once, start one process per device of the mesh, print rank 0's text).
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands/mesh_command.h"
#include "generate/sample_run.h"

namespace spmd {

struct SampleCli : MeshCommandCli {
  bool no_cache = false;
  SampleOptions options;
};

void setup_sample(CLI::App& app, SampleCli& cli);

// argv: this process's whole command line, re-executed for each worker.
int run_sample(SampleCli& cli, const std::vector<std::string>& argv);

}  // namespace spmd
