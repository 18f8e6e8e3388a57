// Collectives that autograd can see (the pattern of Megatron's mappings.py): each crossing into
// or out of a parallel region is one tiny function with a one-line forward/backward contract.
// For a group of one every function is the identity.
#pragma once
#include <ATen/ATen.h>

#include "comm/group.h"

namespace spmd {

// forward: identity; backward: all-reduce (sum) the gradient over the group.
// Use on a replicated input entering a layer whose output is sharded over the group.
at::Tensor copy_to_group(const at::Tensor& x, const Group& group);

// forward: all-reduce (sum) over the group; backward: identity.
// Use on the partial sums leaving a layer whose input was sharded over the group.
at::Tensor reduce_from_group(const at::Tensor& x, const Group& group);

// forward: all-gather along `dim`; backward: reduce-scatter (sum) along `dim`.
// FSDP: each member's gradient of the gathered tensor is a partial sum over its own batch rows.
// Sequence parallelism: the sequence-sharded stream entering a column-parallel layer.
at::Tensor gather_params_from_group(const at::Tensor& x, int64_t dim, const Group& group);

// forward: reduce-scatter (sum) along `dim`; backward: all-gather the gradient along `dim`.
// Megatron's sequence parallelism: the partial sums leaving a row-parallel layer, kept as this
// member's slice of the sequence.
at::Tensor reduce_scatter_to_group(const at::Tensor& x, int64_t dim, const Group& group);

// Sequence parallelism's two crossings of the (B, T, ...) stream, whose dim 1 is the sequence:
// entering a column-parallel layer (gather_params_from_group's contract along the sequence) and
// leaving a row-parallel one.
inline at::Tensor gather_sequence_from_group(const at::Tensor& x, const Group& group) {
  return gather_params_from_group(x, 1, group);
}
inline at::Tensor reduce_scatter_sequence_to_group(const at::Tensor& x, const Group& group) {
  return reduce_scatter_to_group(x, 1, group);
}

// forward: all-gather along `dim`; backward: keep this member's chunk of the gradient.
at::Tensor gather_from_group(const at::Tensor& x, int64_t dim, const Group& group);

// forward: keep this member's chunk along `dim`; backward: all-gather the gradient.
at::Tensor scatter_to_group(const at::Tensor& x, int64_t dim, const Group& group);

}  // namespace spmd
