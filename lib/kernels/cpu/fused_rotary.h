// Rotary embeddings on the CPU on the packed layout the grouped-query attention kernel reads and
// the q, k, v product writes: qkv (B, T, H + 2 Hkv, D) (query heads, then key heads, then value
// heads), its query and key heads rotated, its value heads copied, one autograd node with one pass
// each way (the backward returns the packed gradient the product takes). The same operations as
// rope.h's apply_rope in the same order (float32 and bf16: bit-exact forward; test_fused_llama_kernels).
// Callers outside lib/kernels use kernels::rotary_pack (kernels.h).
#pragma once
#include <ATen/ATen.h>

namespace spmd::kernels::cpu {

// Whether fused_rotary_pack takes these: qkv float32 or bf16 on CPU, (B, T, H + 2 Hkv, D) with
// H > 0 and D even; cos and sin float32 (P, T, 1, D), P 1 or B.
bool fused_rotary_supports(const at::Tensor& qkv, int64_t kv_heads, const at::Tensor& cos, const at::Tensor& sin);

// (B, T, H + 2 Hkv, D) in qkv's dtype: [rope(q), rope(k), v] along the heads, rope(x) = x cos +
// rotate_half(x) sin computed in float32 (rotate_half(x) = [-x2, x1]).
at::Tensor fused_rotary_pack(const at::Tensor& qkv, int64_t kv_heads, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace spmd::kernels::cpu
