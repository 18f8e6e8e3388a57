// bench_train --census GPU: one training step of the GPU's code path run on the CPU under the op
// census (lib/census), printed as tables and a last line scripts read, optionally as JSON.
#pragma once
#include <string>
#include <vector>

namespace spmd::bench {

struct CensusRun {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string gpu;        // a key of census::gpu_specs(): h100, h200, a100
  std::string json_path;  // "" for none
  bool default_allocator = false;
};

// One process, the CPU, runtime.cpu_kernels=generic (appended to the overrides): one warm-up
// step, then the census of the next. A mesh of more than one device is refused (UsageError):
// the census is of one rank's step. Returns the exit code.
int run_census(const CensusRun& run);

}  // namespace spmd::bench
