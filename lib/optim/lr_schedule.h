// The learning rate of every update, a pure function of the config and the update's index: a run
// resumed with another train.steps follows the schedule of that length from its resume step on
// (a warmup-stable-decay run can be extended, or decayed early, from any stable-phase checkpoint).
#pragma once
#include <cstdint>

#include "config/config.h"

namespace spmd {

// The learning rate of update `step` (0-based; metrics.jsonl's step step + 1):
//   cosine   linear warmup to lr over warmup_steps (lr * (step+1)/(warmup+1)), then cosine decay to
//            min_lr at decay_steps, then min_lr (nanoGPT's).
//   wsd      transformers' get_wsd_schedule: warmup from min_lr to lr, lr until the last decay_steps
//            updates, which fall to min_lr shaped decay_shape; then min_lr.
//   linear   the same warmup, then straight down to min_lr at update decay_steps, then min_lr.
//   constant the same warmup, then lr.
double learning_rate_at(const TrainConfig& config, int64_t step);

// Muon's learning rate at the update whose AdamW learning rate is `lr` (learning_rate_at):
// train.muon.lr times the schedule's factor lr / train.lr, as a LambdaLR scales each group's.
double muon_learning_rate(const TrainConfig& config, double lr);

// The factor of get_wsd_schedule's LambdaLR (transformers 5.x) at `step`, with linear warmup,
// num_cycles 0.5 and min_lr_ratio `floor`: the one formula wsd, linear and constant share.
double wsd_multiplier(int64_t step, int64_t warmup, int64_t stable, int64_t decay, DecayShape shape, double floor);

}  // namespace spmd
