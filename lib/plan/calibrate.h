// `spmd-inspect --calibrate`: measures this machine's rates for the planner with real worker
// processes over the config's backend, every device busy at once as in training: each device's
// matmul rate at the model's MLP shape, its elementwise memory rate, and all-reduce latency and
// bandwidth for every group size the device count factors into (N = 8: groups of 2, 4 and 8).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

namespace spmd {

struct CalibrateOptions {
  int64_t devices = 1;
  std::string rates_path;  // the JSON file to write (machine_rates.h's format)
};

// In the launching process: starts `devices` workers (re-running `argv`); rank 0 writes the file.
// In a worker (started by it): measures and returns 0.
int run_calibrate(const Config& config, const CalibrateOptions& options, const std::vector<std::string>& argv);

}  // namespace spmd
