// FSDP layers that keep only the shard (ZeRO-3, FSDP's reshard-after-forward): the weight is
// all-gathered for the forward product and dropped when the layer returns, gathered again in the
// backward, and its gradient is reduce-scattered back to the shard. Autograd never holds a
// gathered copy, so a rank's FSDP working set is its shards plus the layer in use.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "parallel/fsdp_prefetch.h"

namespace spmd {

// Each takes an optional prefetcher: with one, the gathers (forward and backward) go through it,
// so the next FSDP weight's gather overlaps this layer's compute; without, they run on the spot.

// y = x W (+ bias) for x (rows, K), W the gathered weight viewed as (K, N), or, when
// `transposed`, the gathered (N, K) table used as W^T (the tied LM head). `bias` is the full
// bias (gathered by the caller: its add keeps nothing for backward) or undefined; operand_dtype
// as in kernels::dense_product (kernels/kernels.h).
at::Tensor fsdp_linear(const at::Tensor& x, const at::Tensor& weight_shard, const FsdpGathers& gathers,
                       bool transposed, const at::Tensor& bias, FsdpPrefetcher* prefetcher = nullptr,
                       at::ScalarType operand_dtype = at::kFloat);

// Rows `ids` of the gathered table (ids already local to it); libtorch's embedding would keep the
// table for its backward.
at::Tensor fsdp_embedding(const at::Tensor& ids, const at::Tensor& table_shard, const FsdpGathers& gathers,
                          FsdpPrefetcher* prefetcher = nullptr);

// LayerNorm over x's last dim with a gathered scale; `bias` full or undefined, as above.
at::Tensor fsdp_layer_norm(const at::Tensor& x, const at::Tensor& weight_shard, const FsdpGathers& gathers,
                           const at::Tensor& bias, double eps, FsdpPrefetcher* prefetcher = nullptr);

}  // namespace spmd
