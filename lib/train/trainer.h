// One rank's training run: build the sharded model, then step -> log -> eval until done.
#pragma once
#include <string>

#include "comm/communicator.h"
#include "config/config.h"

namespace spmd {

struct TrainOptions {
  std::string dump_init_dir;     // write the initialized global parameters here (tests)
  int64_t inject_nan_at_step = -1;  // test-only: make the loss NaN at this step
  bool single_process = false;   // no rendezvous: a mesh of one device
  bool resume = false;           // continue from a checkpoint
  std::string resume_path;       // "" or "latest": the newest in checkpoint.dir
  int64_t crash_during_save_at_step = -1;  // test-only: rank 0 dies inside this step's save
};

// Runs training on this rank. Returns the process exit code.
int run_training(const Config& config, const RendezvousInfo& rendezvous, const TrainOptions& options);

}  // namespace spmd
