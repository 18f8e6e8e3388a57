// Sharded, atomic checkpoints (Orbax-style). Saving: ckpt/checkpoint_saver.h. One directory per step:
//   <dir>/step_00000100/index.json            rank 0: mesh, rules, config, every array's blocks
//   <dir>/step_00000100/rank_00003.safetensors each rank: the blocks it is the primary holder of
// Written under step_XXXXXXXX.tmp, fsynced, renamed by rank 0 once every rank is done: a crash mid-save
// leaves the previous checkpoint as the latest. Restore works onto any mesh: each rank reads just
// the parts of saved blocks that overlap its own shards.
#pragma once
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "config/config.h"
#include "data/loader.h"
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
};

// The rank's block of parameter i's array `kind` ("param", "exp_avg", "exp_avg_sq"): saved and restored alike.
at::Tensor& checkpoint_local_array(CheckpointState& s, const std::string& kind, size_t i);

// The newest complete checkpoint (one with index.json) under `dir`, if any.
std::optional<std::string> find_latest_checkpoint(const std::string& dir);

// Collective: loads `path` (a step directory) into the state: parameters, AdamW state, step,
// data iterator. UsageError (exit 2) naming the file for anything missing, truncated, corrupted
// or incompatible; nothing is modified on disk.
void restore_checkpoint(CheckpointState& state, const std::string& path);

// Collective: loads only the parameters of checkpoint `path` into `model` (any mesh), for
// sampling. UsageError as restore_checkpoint.
void restore_parameters(ShardedModel& model, const std::string& path);

// The effective config (YAML) a checkpoint was written with. UsageError when `path` is not one.
std::string checkpoint_config_yaml(const std::string& path);

// Resolves --resume: "" or "latest" -> newest complete checkpoint in checkpoint.dir (error if
// none); "auto" -> the same, or "" when there is none yet (start from step 0: what a job restarted
// by an external launcher passes); otherwise the given directory.
std::string resolve_resume_path(const Config& config, const std::string& requested);

}  // namespace spmd
