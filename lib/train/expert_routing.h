// The step's routing for the load-balancing loss and the load statistics (docs/experts.md):
// what every sparse layer routed over the whole global batch, summed over ranks, microbatches and
// stages, so that every mesh gives one process's numbers.
#pragma once
#include <memory>

#include "experts/step_routing.h"
#include "train/train_state.h"

namespace spmd {

// Null for a model without experts.
std::unique_ptr<StepRouting> new_step_routing(const TrainState& s);

// Whether the routing must be tallied by a forward of its own before the step's passes: the
// balancing loss is on, and this rank runs more than one forward before its first backward
// reads the whole step's routing (microbatches, pipeline chunks). One forward without
// gradients, as in evaluation: the price of pooling over the whole step.
bool routes_ahead(const TrainState& s);

RoutingTally empty_routing_tally(const TrainState& s);

// This rank's tally summed over every rank that routes other tokens or other layers, settled
// into `step` (a collective over them).
void settle_step_routing(const TrainState& s, const RoutingTally& tally, StepRouting& step);

// Auxiliary-loss-free balancing (model.moe.expert_bias_update_rate > 0): each sparse layer's
// choice bias moves by the rate toward the mean load, up for an expert below it, down above
// (DeepSeek-V3), from the step's counts, the same on every rank. Nothing without it.
void move_expert_biases(TrainState& s, const at::Tensor& counts);

}  // namespace spmd
