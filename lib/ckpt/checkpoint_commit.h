// Rank 0's commit of one checkpoint save, once every rank's files are written: the index from the
// ranks' manifests, the tokenizer, the rename of step_N.tmp to step_N and the pruning to
// checkpoint.keep (ckpt/checkpoint_format.h has the layout).
#pragma once
#include "ckpt/shard_writer.h"

namespace spmd {

// Rank 0, once every rank's files are written: the index (from the manifests), the tokenizer,
// the rename of step_N.tmp to step_N and the pruning to checkpoint.keep. Collective-free.
void commit_save(const SaveJob& job, const Config& config, const ModelLayout& layout);

}  // namespace spmd
