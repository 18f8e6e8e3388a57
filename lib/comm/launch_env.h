// Which launcher started this process, read from its environment: torchrun's variables, then
// Slurm's srun, then Open MPI's mpirun (in that order). Pure functions over an environment map,
// so every case is unit-testable; UsageError (exit 2) names the variables that are missing,
// malformed or contradictory.
#pragma once
#include <map>
#include <optional>
#include <string>

namespace spmd {

using EnvMap = std::map<std::string, std::string>;

EnvMap current_environment();

// Set by spmd-train's own launcher in its workers' environment (they also get torchrun's
// variables): their rank 0 then does not announce a launcher the parent already announced.
inline constexpr const char* kBuiltinLauncherMark = "SPMD_LAUNCHER";

// What comm/communicator.h's RendezvousInfo adds to (kept apart: that header brings glog's CHECK).
struct LaunchRanks {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

struct LaunchEnv {
  std::string launcher;             // "torchrun", "srun", "mpirun", or "spmd-train" (our own workers)
  LaunchRanks rendezvous;           // this process's place and where rank 0 serves the store
  std::string world_size_variable;  // the variable that gave the world size, for error messages
  std::string description;          // one line for people: what was found and what it implies
};

// nullopt: no launcher started this process (spmd-train launches its own workers).
std::optional<LaunchEnv> detect_launch_env(const EnvMap& env);

// The line the built-in launcher prints: how many workers, and any Slurm job it runs inside
// without being an srun step (an salloc shell or a batch script).
std::string describe_builtin_launch(const EnvMap& env, int local_workers);

// A rendezvous port every rank derives alike from a job identifier: in [kDerivedPortFirst, kDerivedPortEnd).
constexpr int kDerivedPortFirst = 10000, kDerivedPortEnd = 32768;
int port_from_job_id(const std::string& job_id);

}  // namespace spmd
