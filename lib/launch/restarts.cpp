// Restarting all workers from the newest checkpoint after a failure (see restarts.h).
#include "launch/restarts.h"

#include <cstdlib>

#include <fmt/format.h>

#include "ckpt/checkpoint_format.h"

namespace spmd {

std::vector<std::string> argv_resuming_from(const std::vector<std::string>& argv, const std::string& checkpoint) {
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i].rfind("--resume=", 0) == 0) continue;
    if (argv[i] == "--resume") {
      if (i + 1 < argv.size() && argv[i + 1].rfind("-", 0) != 0) ++i;  // its PATH
      continue;
    }
    out.push_back(argv[i]);
  }
  out.insert(out.end(), {"--resume", checkpoint});
  return out;
}

int launch_with_restarts(const LaunchOptions& options, const std::vector<std::string>& argv,
                         const RestartPolicy& policy) {
  std::vector<std::string> attempt_argv = argv;
  for (int restart = 0;; ++restart) {
    setenv("SPMD_RESTART_COUNT", std::to_string(restart).c_str(), 1);
    std::string failure;
    const int code = launch_workers(options, attempt_argv, &failure);
    // Only a worker's runtime failure (exit 1) is worth a retry: a usage error would recur, and a
    // signal to the launcher means someone wants the job stopped.
    if (code != 1 || policy.max_restarts == 0) return code;
    if (restart == policy.max_restarts) {
      fmt::print(stderr, "spmd-train: giving up after {} restart(s) (--max-restarts {}): {}\n", restart,
                 policy.max_restarts, failure);
      return code;
    }
    const auto latest = find_latest_checkpoint(policy.checkpoint_dir);
    if (latest) attempt_argv = argv_resuming_from(argv, *latest);
    fmt::print(stderr, "spmd-train: restart {} of {} after {}: {}\n", restart + 1, policy.max_restarts, failure,
               latest ? "resuming from " + *latest
                      : fmt::format("no checkpoint in '{}' yet, starting again", policy.checkpoint_dir));
    std::fflush(stderr);
  }
}

}  // namespace spmd
