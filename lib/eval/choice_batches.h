// Scoring a task's examples in batches over the data-parallel ranks: each pass gives every
// data-parallel rank `examples_per_rank` examples, all their choices one row each (padded to the
// task's most choices), right-padded to one length; every rank gathers every rank's losses, so all
// get the same scores. The forward itself is the caller's (a training step's stages, or a
// checkpoint's model).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/ATen.h>

#include "comm/group.h"
#include "eval/choice_scoring.h"

namespace spmd {

struct ChoiceBatching {
  int64_t dp_index = 0, dp_size = 1;
  const Group* dp_group = nullptr;  // over the data-parallel ranks, in dp_index order; null: one
  int64_t examples_per_rank = 1;    // per pass
  int64_t block_size = 0;
  int64_t seq_multiple = 1;         // the row length divides by this (context / sequence splits) or is block_size
  c10::Device device = c10::kCPU;
};

// (rows, T) int64 inputs and targets (-1: not scored) -> (rows,) float64: each row's summed
// cross-entropy over its scored positions, the same on every rank of a data-parallel line.
using RowLosses = std::function<at::Tensor(const at::Tensor& inputs, const at::Tensor& targets)>;

// Every example's per-choice sums and means. Every rank calls it with the same examples.
std::vector<ExampleScore> score_examples(const std::vector<EncodedExample>& examples, const ChoiceBatching& batching,
                                         const RowLosses& row_losses);

// Examples per rank for a pass of about `rows_per_rank` rows (at least one example).
int64_t examples_per_pass(const std::vector<EncodedExample>& examples, int64_t rows_per_rank);

}  // namespace spmd
