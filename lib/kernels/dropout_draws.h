// A dropout mask given by its generator instead of its values: the block of a global array that a
// rank holds, the stream's key and the drop probability. Each element's multiplier (0 or
// 1/(1-p)) is a pure function of its global index (kernels/counter_hash.h), so a kernel can draw
// the elements it needs when it needs them, with the bits the materialized mask has, and keep
// nothing for backward (the CPU's fused attention does: a (B, H, T, T) mask is as large as the
// probabilities).
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "kernels/counter_hash.h"

namespace spmd::kernels {

// counter_hash's index math for the block of `global_shape` starting at `offset`, `local_shape` big.
counter_hash::BlockIndex block_index(const std::vector<int64_t>& local_shape, const std::vector<int64_t>& global_shape,
                                     const std::vector<int64_t>& offset);

struct DropoutDraws {
  std::vector<int64_t> shape;  // the local block's (rank 0: one element)
  counter_hash::BlockIndex block{};
  uint64_t key = 0;  // the stream's (seed and stream name)
  double p = 0;
  bool present = false;  // default-constructed: no dropout

  DropoutDraws() = default;
  DropoutDraws(std::vector<int64_t> local_shape, const std::vector<int64_t>& global_shape,
               const std::vector<int64_t>& offset, uint64_t key, double p);
  bool defined() const { return present; }
  float keep_scale() const { return static_cast<float>(1.0 / (1.0 - p)); }
  double p_scaled() const { return p * 9007199254740992.0; }  // p * 2^53, exact

  // The multipliers of the local elements [first, first + n), which lie in one row of the last
  // dimension, into out.
  void fill_row(float* out, int64_t first, int64_t n) const;
  // The whole block as a float32 tensor on `device`: on a GPU one kernel (kernels/cuda, no host
  // work), on the CPU a vectorized loop over rows in parallel; the same bits.
  at::Tensor materialize(c10::Device device) const;

  // As autograd's saved data (a kernel's backward draws again): the fields as integers, and back.
  std::vector<int64_t> to_ints() const;
  static DropoutDraws from_ints(const std::vector<int64_t>& ints);
};

}  // namespace spmd::kernels
