// Rotary embeddings on the CPU, written straight into the layout the grouped-query attention
// kernel reads: q (B, T, H, D) and k (B, T, Hkv, D) rotated, v copied, into one (B, T, H + 2 Hkv, D)
// tensor (query heads, then key heads, then value heads), one autograd node with one pass each
// way. The same operations as rope.h's apply_rope in the same order (float32 and bf16: bit-exact
// forward; test_fused_rotary). Callers outside lib/kernels use kernels::rotary_pack (kernels.h).
#pragma once
#include <ATen/ATen.h>

namespace spmd::kernels::cpu {

// Whether fused_rotary_pack takes these: q, k, v float32 or bf16 of one dtype on CPU, (B, T, ., D)
// with k and v of one shape; cos and sin float32 (P, T, 1, D), P 1 or B.
bool fused_rotary_supports(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                           const at::Tensor& sin);

// (B, T, H + 2 Hkv, D) in q's dtype: [rope(q), rope(k), v] along the heads, rope(x) = x cos +
// rotate_half(x) sin computed in float32 (rotate_half(x) = [-x2, x1]).
at::Tensor fused_rotary_pack(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                             const at::Tensor& sin);

}  // namespace spmd::kernels::cpu
