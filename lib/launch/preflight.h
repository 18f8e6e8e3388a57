// Checks, once and before any worker starts, every input a training run will read or write:
// data files (their token ids against model.vocab_size, their length against model.block_size),
// the checkpoint to resume from, and the output and checkpoint directories. New inputs (a
// tokenizer, train.init_from, ...) add their check here.
#pragma once
#include "config/config.h"
#include "config/train_options.h"

namespace spmd {

// UsageError naming the config key (or option) and the file when an input is unusable.
void preflight_check(const Config& config, const TrainOptions& options);

}  // namespace spmd
