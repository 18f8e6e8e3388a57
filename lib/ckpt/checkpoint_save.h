// The steps of one checkpoint save, as plain functions (no threads): what the step boundary
// takes from the training state, what each rank writes, and rank 0's commit. CheckpointSaver
// (ckpt/checkpoint_saver.h) runs them in the loop or in the background.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"

namespace spmd {

// One save, everything the writer needs, taken at the step boundary.
struct SaveJob {
  int64_t step = 0;
  std::string dir, tmp_dir, final_dir;  // checkpoint.dir, step_N.tmp, step_N
  int rank = 0;
  std::vector<NamedTensor> blocks;  // float32: the blocks this rank is the primary holder of (host and
                                    // contiguous once staged)
  nlohmann::json small_state;       // step, data iterator, optimizer steps: their values at the boundary
};

// The job for the state's current step, its blocks still the live tensors: copy them to the host
// before training goes on.
SaveJob describe_save(CheckpointState& state);

// Collective (control group): rank 0 discards a stale temporary directory and creates it afresh.
// False when this step is saved already (nothing to do).
bool prepare_save_dir(CheckpointState& state, const SaveJob& job);

// This rank's shard file and manifest in job.tmp_dir, fsynced. Checks `cancelled` between
// tensors. RuntimeError naming the file on any failure.
void write_rank_files(const SaveJob& job, const std::atomic<bool>& cancelled);

// Rank 0, once every rank's files are written: the index (from the manifests), the tokenizer,
// the rename of step_N.tmp to step_N and the pruning to checkpoint.keep. Collective-free.
void commit_save(const SaveJob& job, const Config& config, const ModelLayout& layout);

}  // namespace spmd
