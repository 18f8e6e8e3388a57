#include "commands/launch_to_stdout.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "launch/launcher.h"
#include "launch/preflight_ranks.h"  // mark_launched_workers

namespace spmd {

int launch_to_stdout(const Config& config, int nproc, const std::vector<std::string>& argv, bool to_stdout,
                     const std::string& result_flag, const std::string& command) {
  const std::string result_file =
      (std::filesystem::temp_directory_path() / fmt::format("spmd-{}-{}.txt", command, getpid())).string();
  std::vector<std::string> worker_argv = argv;
  if (to_stdout) worker_argv.insert(worker_argv.end(), {result_flag, result_file});
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

}  // namespace spmd
