// One rank's training run: build the sharded model, then step -> log -> eval until done.
#pragma once
#include <string>

#include "comm/communicator.h"
#include "config/config.h"
#include "config/train_options.h"

namespace spmd {

// Runs training on this rank. Returns the process exit code.
int run_training(const Config& config, const RendezvousInfo& rendezvous, const TrainOptions& options);

}  // namespace spmd
