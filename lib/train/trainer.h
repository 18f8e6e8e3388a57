// One rank's training run: build the sharded model, then step -> log -> eval until done.
#pragma once
#include <string>

#include "comm/communicator.h"
#include "config/config.h"

namespace spmd {

struct TrainOptions {
  bool single_process = false;   // no rendezvous: a mesh of one device
  bool resume = false;           // continue from a checkpoint
  std::string resume_path;       // "" or "latest": the newest in checkpoint.dir; "auto": that or none; or a PATH
};

// Runs training on this rank. Returns the process exit code.
int run_training(const Config& config, const RendezvousInfo& rendezvous, const TrainOptions& options);

}  // namespace spmd
