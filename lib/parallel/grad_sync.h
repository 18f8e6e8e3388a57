// Gradient synchronization after backward, and the global gradient norm over distinct blocks.
#pragma once
#include "parallel/sharded_model.h"

namespace spmd {

// Each rank's loss is the mean over its own rows, so the global gradient is the mean over the
// data-parallel ranks: sum over the batch axes a parameter is replicated on (FSDP dims were
// already reduce-scattered), then divide by the data-parallel degree. Coalesced per group.
void sync_gradients(ShardedModel& model);

// sqrt of the sum of squared gradients, each distinct block counted once (replicas skipped).
double global_grad_norm(const ShardedModel& model);

}  // namespace spmd
