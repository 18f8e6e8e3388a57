// The forward and backward passes of one step on this rank's pipeline stage, in the order of
// runtime.pipeline_schedule (over each of its chunks when interleaved), and the forward-only pass
// of evaluation. Without stages a rank is the only stage: its microbatches run forward, backward,
// forward, backward... as plain gradient accumulation.
#pragma once
#include <ATen/ATen.h>

#include "train/train_state.h"

namespace spmd {

// Runs the step's M = train.microbatches passes over `inputs`/`targets` (this rank's rows,
// sliced into M), leaving the gradients in .grad (grad_sync armed for the last backward).
// Returns the sum of the microbatches' mean losses as a 0-dim float64 on every stage.
// result.graph_bytes: the most bytes the graphs of microbatches in flight held at once.
at::Tensor run_step_passes(TrainState& state, const at::Tensor& inputs, const at::Tensor& targets,
                           StepResult& result);

// This rank's mean loss over `inputs`/`targets` without gradients, through every stage (0-dim
// float64 on every stage).
at::Tensor evaluate_passes(TrainState& state, const at::Tensor& inputs, const at::Tensor& targets);

// Benchmark scoring: each row's summed loss over the positions whose target is not negative,
// through every stage ((rows,) float on every stage).
at::Tensor row_losses_passes(TrainState& state, const at::Tensor& inputs, const at::Tensor& targets);

}  // namespace spmd
