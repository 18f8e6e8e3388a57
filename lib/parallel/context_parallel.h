// Context parallelism's head-tail split of the sequence (docs/context-parallel.md): a sequence of T positions is
// cut into 2 * size chunks of T / (2 * size), and member `index` of the context axes holds chunks
// `index` and `2 * size - 1 - index`, so that under the causal mask every member attends over the
// same number of (query, key) pairs. Mesh-free: a member's place comes in a ContextSplit.
#pragma once
#include <array>
#include <cstdint>

#include <ATen/ATen.h>

#include "comm/group.h"

namespace spmd {

struct ContextSplit {
  int64_t size = 1;   // members of the context axes
  int64_t index = 0;  // this rank's place among them
  // The first positions of this member's two chunks in a sequence of `length` positions.
  std::array<int64_t, 2> chunk_starts(int64_t length) const;
};

// This member's two chunks of x's whole sequence along `dim`, concatenated. Autograd: the
// gradient lands on those positions, zero elsewhere.
at::Tensor take_context_chunks(const at::Tensor& x, int64_t dim, const ContextSplit& split);

// The global positions of a member's `local_length` positions, in its order: (local_length,) int64.
at::Tensor context_positions(int64_t local_length, const ContextSplit& split, const at::Device& device);

// Every member's chunks of x (B, T_local, ...) gathered over `group` and put back in sequence
// order: (B, T, ...). Backward: each member's gradient is a partial sum, reduce-scattered back.
at::Tensor gather_context_sequence(const at::Tensor& x, const Group& group, const ContextSplit& split);

}  // namespace spmd
