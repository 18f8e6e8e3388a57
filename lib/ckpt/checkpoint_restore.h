// Reading a sharded checkpoint back (Orbax-style restore). The directory layout is
// ckpt/checkpoint_format.h's; saving is ckpt/checkpoint_saver.h's. Restore works onto any mesh: each
// rank reads just the parts of saved blocks that overlap its own shards.
#pragma once
#include <string>

#include "ckpt/checkpoint_state.h"

namespace spmd {

// Collective: loads `path` (a step directory) into the state: parameters, AdamW state, step,
// data iterator. UsageError (exit 2) naming the file for anything missing, truncated, corrupted
// or incompatible; nothing is modified on disk.
void restore_checkpoint(CheckpointState& state, const std::string& path);

// Collective: loads only the parameters of checkpoint `path` into `model` (any mesh), for
// sampling. UsageError as restore_checkpoint.
void restore_parameters(ShardedModel& model, const std::string& path);

// Every parameter of checkpoint `path`, whole and with its vocabulary padding, read on this
// process alone (no communicator): the model its index.json's config describes, laid out on one
// process, restored with the same checks as restore_parameters. What export consolidates.
struct WholeParameters {
  ModelLayout layout;  // one process: every parameter unsharded
  std::vector<at::Tensor> tensors;  // in layout.params order
};
WholeParameters read_whole_parameters(const std::string& path);

// The effective config (YAML) a checkpoint was written with. UsageError when `path` is not one.
std::string checkpoint_config_yaml(const std::string& path);

// Resolves --resume: "" or "latest" -> newest complete checkpoint in checkpoint.dir (error if
// none); "auto" -> the same, or "" when there is none yet (start from step 0: what a job restarted
// by an external launcher passes); otherwise the given directory.
std::string resolve_resume_path(const Config& config, const std::string& requested);

}  // namespace spmd
