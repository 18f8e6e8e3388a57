// Counter-based random numbers: element i of a stream is a pure function of (seed, stream, i),
// so every rank can draw exactly its own shard of a parameter or dropout mask, and the global
// values do not depend on the mesh.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "kernels/dropout_draws.h"

namespace spmd {

uint64_t stream_id(const std::string& name);  // a stable 64-bit hash of a name

// Fills `local` (a contiguous float tensor, the block of a global array of `global_shape`
// starting at `offset`) with N(0, std^2) draws indexed by the global element index.
void fill_normal_block(at::Tensor& local, const std::vector<int64_t>& global_shape,
                       const std::vector<int64_t>& offset, uint64_t seed, uint64_t stream, double std);

// One uniform draw in (0, 1]: element `index` of the stream (sampling a token at a position).
double uniform_draw(uint64_t seed, uint64_t stream, uint64_t index);

// The dropout mask of the block of a global array, as its generator: drawn by the kernel that
// applies it (kernels::causal_attention on a CPU), or materialized by the two below.
kernels::DropoutDraws dropout_draws(const std::vector<int64_t>& local_shape, const std::vector<int64_t>& global_shape,
                                    const std::vector<int64_t>& offset, uint64_t seed, uint64_t stream, double p);

// Dropout keep-mask scaled by 1/(1-p) for the block of a global array, as above.
at::Tensor dropout_mask_block(const std::vector<int64_t>& local_shape, const std::vector<int64_t>& global_shape,
                              const std::vector<int64_t>& offset, uint64_t seed, uint64_t stream, double p);

// The same mask bit for bit, drawn on `device`: on a GPU by one NVRTC-compiled kernel
// (kernels/cuda/counter_dropout.h) on the current stream, no host work and no copy; on the CPU by
// dropout_mask_block's loop. Both take each element from kernels/counter_hash.h.
at::Tensor dropout_mask_block_on(c10::Device device, const std::vector<int64_t>& local_shape,
                                 const std::vector<int64_t>& global_shape, const std::vector<int64_t>& offset,
                                 uint64_t seed, uint64_t stream, double p);

}  // namespace spmd
