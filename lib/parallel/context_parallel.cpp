// Head-tail chunks: cutting, positions, and the all-gather that restores sequence order.
#include "parallel/context_parallel.h"

#include <vector>

#include "comm/collectives.h"
#include "util/error.h"

namespace spmd {

std::array<int64_t, 2> ContextSplit::chunk_starts(int64_t length) const {
  SPMD_ASSERT(length % (2 * size) == 0, "a sequence of {} does not cut into 2 x {} chunks", length, size);
  const int64_t chunk = length / (2 * size);
  return {index * chunk, (2 * size - 1 - index) * chunk};
}

at::Tensor take_context_chunks(const at::Tensor& x, int64_t dim, const ContextSplit& split) {
  if (split.size == 1) return x;
  const int64_t chunk = x.size(dim) / (2 * split.size);
  const auto starts = split.chunk_starts(x.size(dim));
  return at::cat({x.narrow(dim, starts[0], chunk), x.narrow(dim, starts[1], chunk)}, dim);
}

at::Tensor context_positions(int64_t local_length, const ContextSplit& split, const at::Device& device) {
  const auto options = at::TensorOptions().dtype(at::kLong).device(device);
  const int64_t chunk = local_length / 2;
  const auto starts = split.chunk_starts(local_length * split.size);
  return at::cat({at::arange(starts[0], starts[0] + chunk, options), at::arange(starts[1], starts[1] + chunk, options)});
}

at::Tensor gather_context_sequence(const at::Tensor& x, const Group& group, const ContextSplit& split) {
  SPMD_ASSERT(group.size() == split.size, "context group of {} for a split of {}", group.size(), split.size);
  if (split.size == 1) return x;
  // Member j's block holds chunks j and 2p-1-j: chunk q sits in slot 2q (q < p) or 2(2p-1-q)+1.
  const at::Tensor gathered = gather_params_from_group(x.contiguous(), 1, group);
  const int64_t p = split.size, chunk = x.size(1) / 2;
  std::vector<at::Tensor> in_order;
  for (int64_t q = 0; q < 2 * p; ++q) {
    const int64_t slot = q < p ? 2 * q : 2 * (2 * p - 1 - q) + 1;
    in_order.push_back(gathered.narrow(1, slot * chunk, chunk));
  }
  return at::cat(in_order, 1);
}

}  // namespace spmd
