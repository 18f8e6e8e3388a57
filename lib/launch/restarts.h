// --max-restarts for the built-in launcher: when a worker dies, launch_workers tears the others
// down; then every worker starts again from the newest complete checkpoint in checkpoint.dir
// (from the beginning if there is none yet), at most max_restarts times. A usage error (exit 2)
// or a signal to the launcher itself ends the job at once.
#pragma once
#include <string>
#include <vector>

#include "launch/launcher.h"

namespace spmd {

struct RestartPolicy {
  int max_restarts = 0;
  std::string checkpoint_dir;  // where restarts look for the newest checkpoint ("" = none)
};

// Runs launch_workers until it succeeds or the restarts are spent; returns the exit code. The
// workers see SPMD_RESTART_COUNT (0 for the first attempt), as torchrun's TORCHELASTIC_RESTART_COUNT.
int launch_with_restarts(const LaunchOptions& options, const std::vector<std::string>& argv,
                         const RestartPolicy& policy);

// `argv` without any --resume [PATH] of its own, resuming from `checkpoint` instead.
std::vector<std::string> argv_resuming_from(const std::vector<std::string>& argv, const std::string& checkpoint);

}  // namespace spmd
