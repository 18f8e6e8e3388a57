// Rotary position embeddings in Hugging Face's convention (rotate_half: dim i pairs with
// i + D/2), so Llama checkpoints' q and k weights need no permutation. Pure tensor math.
#pragma once
#include <ATen/ATen.h>

#include "config/config.h"

namespace spmd {

// The D/2 rotation frequencies theta^(-2i/D), i < D/2 (D = head_dim), with Llama 3's
// rope_scaling applied when set: (D/2,) float32 on the CPU.
at::Tensor rope_inverse_frequencies(const ModelConfig& config);

// cos and sin of every position's angles, (P, T, 1, D) float32 for positions (P, T) int64 (P = 1
// or B): the frequencies repeated over both halves of the head dim.
struct RopeAngles {
  at::Tensor cos, sin;
};
RopeAngles rope_angles(const at::Tensor& positions, const at::Tensor& inverse_frequencies);

// x (B, T, H, D) rotated by the angles: x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1];
// computed in float32, returned in x's dtype.
at::Tensor apply_rope(const at::Tensor& x, const RopeAngles& angles);

}  // namespace spmd
