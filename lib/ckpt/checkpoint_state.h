// What a checkpoint holds of a run: references to the trainer's parts, saved (ckpt/shard_writer.h)
// and restored (ckpt/checkpoint_restore.h) alike.
#pragma once
#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "config/config.h"
#include "data/loader.h"
#include "muon/muon.h"
#include "optim/adamw.h"
#include "parallel/sharded_model.h"

namespace spmd {

// What a checkpoint holds of a run: the parts of the training state (owned by the trainer).
struct CheckpointState {
  const Config& config;
  Communicator& comm;
  ShardedModel& model;
  AdamW& optimizer;
  DataLoader& loader;
  int64_t& step;  // the next step to run
  Muon* muon = nullptr;  // train.optimizer muon: the matrices' momentum (the other parameters' state is AdamW's)
};

// The rank's block of parameter i's array `kind` ("param", "exp_avg", "exp_avg_sq", "momentum"; the
// parameter's checkpoint_array_kinds): saved and restored alike.
at::Tensor& checkpoint_local_array(CheckpointState& s, const std::string& kind, size_t i);

}  // namespace spmd
