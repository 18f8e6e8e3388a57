// Writing one step's blocks, as plain functions (no threads): what the step boundary takes from
// the training state, and the shard file and manifest each rank writes into the step's temporary
// directory. CheckpointSaver (ckpt/checkpoint_saver.h) runs them in the loop or in the background;
// rank 0's commit (ckpt/checkpoint_commit.h) turns the manifests into the index.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_state.h"
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

// Which member of each replica group writes the group's block (parameter and optimizer state),
// by parameter, then by group in replica_groups() order: the member with the fewest bytes to
// write so far (ties: the first), so the replicas share the writing and the staging copy (data
// parallelism over 2: each rank about half) instead of one holder doing it all. A function of the
// layout alone: every rank computes the same.
std::vector<std::vector<int64_t>> block_writers(const ModelLayout& layout);

}  // namespace spmd
