// The experts' SwiGLU on rows grouped by expert: one product per expert on its contiguous block
// (no loop over tokens), down(silu(x . gate_e) * (x . up_e)). Kernels know nothing of meshes, and
// neither does this: the weights are whatever experts (and mlp slice) the caller holds.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace spmd {

// x (R, C) rows in expert order, counts[e] of them for local expert e (sum R); gate, up (E_l, C, I),
// down (E_l, I, C), as matmul operands in `operands` dtype. Returns (R, C) in float32.
at::Tensor grouped_swiglu_experts(const at::Tensor& x, const std::vector<int64_t>& counts, const at::Tensor& gate,
                                  const at::Tensor& up, const at::Tensor& down, at::ScalarType operands);

}  // namespace spmd
