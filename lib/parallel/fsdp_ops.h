// FSDP layers that keep only the shard (ZeRO-3, FSDP's reshard-after-forward): the weight comes
// gathered from its unit (fsdp_prefetch.h: one all-gather per block) for the forward product and
// again in the backward, and autograd never holds a gathered copy, so a rank's FSDP working set is
// its shards plus the units in use. The weights' gradients reach the shards through their unit's
// node, one reduce-scatter per unit once every weight of the unit has its gradient.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "parallel/fsdp_prefetch.h"

namespace spmd {

// An FSDP weight as the layers take it: its index, the prefetcher that gathers it, and its
// gradient handle (a stand-in of the gathered shape, output of the unit's node: a layer's
// gradient for the weight flows into it), undefined without grad mode.
struct FsdpWeight {
  size_t index = 0;
  FsdpPrefetcher* prefetcher = nullptr;
  at::Tensor grad_handle;
};

// The gradient handles of every weight of `unit` (in the unit's order): one autograd node whose
// backward reduce-scatters the unit's gradients to its shards in one collective.
std::vector<at::Tensor> fsdp_unit_grad_handles(FsdpPrefetcher& prefetcher, int64_t unit);

// The gathered weight as a tensor autograd may keep (biases, position tables): its gradient goes
// to the unit's node.
at::Tensor fsdp_param(const FsdpWeight& weight);

// y = x W (+ bias) for x (rows, K), W the gathered weight viewed as (K, N), or, when
// `transposed`, the gathered (N, K) table used as W^T (the tied LM head). `bias` is the full
// bias or undefined; operand_dtype as in kernels::dense_product (kernels/kernels.h).
at::Tensor fsdp_linear(const at::Tensor& x, const FsdpWeight& weight, bool transposed, const at::Tensor& bias,
                       at::ScalarType operand_dtype = at::kFloat);

// Rows `ids` of the gathered table (ids already local to it); libtorch's embedding would keep the
// table for its backward.
at::Tensor fsdp_embedding(const at::Tensor& ids, const FsdpWeight& table);

// LayerNorm over x's last dim with a gathered scale; `bias` full or undefined, as above.
at::Tensor fsdp_layer_norm(const at::Tensor& x, const FsdpWeight& weight, const at::Tensor& bias, double eps);

}  // namespace spmd
