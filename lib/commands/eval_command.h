// The `spmd-train eval` subcommand: its options, and the launcher's side (check the inputs once,
// start one process per device of the mesh, print rank 0's result).
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands/mesh_command.h"
#include "eval/eval_run.h"

namespace spmd {

struct EvalCli : MeshCommandCli {
  EvalOptions options;
};

void setup_eval(CLI::App& app, EvalCli& cli);

// argv: this process's whole command line, re-executed for each worker.
int run_eval_command(EvalCli& cli, const std::vector<std::string>& argv);

}  // namespace spmd
