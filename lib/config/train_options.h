// How `spmd-train` was asked to run, beside the config: what the launcher's checks and every
// rank's trainer both need.
#pragma once
#include <string>

namespace spmd {

struct TrainOptions {
  bool single_process = false;   // no rendezvous: a mesh of one device
  bool resume = false;           // continue from a checkpoint
  std::string resume_path;       // "" or "latest": the newest in checkpoint.dir; "auto": that or none; or a PATH
};

}  // namespace spmd
