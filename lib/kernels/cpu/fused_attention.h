// Fused causal self-attention on CPU: one autograd node for softmax(Q K^T / sqrt(D) + causal) V over
// every (row, head), computed head by head in parallel with the causal mask applied by index (no
// mask tensor, no score copies, the upper triangle's products skipped). Saves only qkv and the
// probabilities for backward (and a dropout mask given as a tensor; one given as its draws is
// drawn again). The unfused libtorch computation is its reference (test_fused_attention).
// Callers outside lib/kernels use kernels::causal_attention (kernels/kernels.h), which picks it.
#pragma once
#include <ATen/ATen.h>

#include "kernels/dropout_draws.h"

namespace spmd::kernels::cpu {

// Whether fused_causal_attention can take `qkv` (float32 or bf16 (B, T, 3, H, D) on CPU),
// `dropout_mask` (undefined, or float32 (B, H, T, T) on CPU) and `document_starts` (undefined, or
// int64 (B, T) on CPU); otherwise use the unfused ops.
bool fused_attention_supports(const at::Tensor& qkv, const at::Tensor& dropout_mask = at::Tensor(),
                              const at::Tensor& document_starts = at::Tensor());

// qkv: (B, T, 3, H, D) as the c_attn dense layer produces it. Returns y: (B, T, H, D) in qkv's
// dtype. bf16 qkv: computed in float32 on its values, y and the gradient rounded to bf16.
// dropout_mask: undefined, or (B, H, T, T) multipliers of the probabilities (0 or 1/(1-p)), as
// ops.dropout would apply them: y = (softmax(...) * dropout_mask) V.
// document_starts: undefined, or (B, T) with row i's document start (non-decreasing, <= i):
// query i then sees keys document_starts[b, i] .. i only, and the products before a block's first
// start are skipped too.
at::Tensor fused_causal_attention(const at::Tensor& qkv, const at::Tensor& dropout_mask = at::Tensor(),
                                  const at::Tensor& document_starts = at::Tensor());

// The same with dropout as its draws (undefined: none), a (B, H, T, T) block: each head's
// multipliers drawn where they are applied, in forward and again in backward, the bits of
// dropout.materialize() passed as dropout_mask above, and no mask kept between the passes.
at::Tensor fused_causal_attention(const at::Tensor& qkv, const DropoutDraws& dropout,
                                  const at::Tensor& document_starts = at::Tensor());

// Grouped-query attention on the packed layout (B, T, H + 2 Hkv, D): H query heads, then Hkv key
// heads, then Hkv value heads (kernels/cpu/fused_rotary.h writes it); query head h reads key/value
// head h / (H / Hkv), which is never repeated: its gradient sums its query heads' in one buffer.
// The same kernel as above (Hkv = H is the (B, T, 3, H, D) layout); dropout draws are a
// (B, H, T, T) block. y: (B, T, H, D).
bool fused_grouped_attention_supports(const at::Tensor& packed, int64_t kv_heads,
                                      const at::Tensor& document_starts = at::Tensor());
at::Tensor fused_grouped_attention(const at::Tensor& packed, int64_t kv_heads, const DropoutDraws& dropout,
                                   const at::Tensor& document_starts = at::Tensor());

}  // namespace spmd::kernels::cpu
