// `spmd-inspect --calibrate`: starts one worker process per device over the config's backend;
// each runs the planner's probe (plan/calibrate.h) and rank 0 writes the rates file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

namespace spmd {

struct CalibrateOptions {
  int64_t devices = 1;
  std::string rates_path;  // the JSON file to write (plan/machine_rates.h's format)
};

// In the launching process: starts `devices` workers (re-running `argv`); rank 0 writes the file.
// In a worker (started by it): measures and returns 0.
int run_calibrate(const Config& config, const CalibrateOptions& options, const std::vector<std::string>& argv);

}  // namespace spmd
