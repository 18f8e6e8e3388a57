// One block of attention on CPU, for callers that merge blocks by their log-sum-exp (ring
// attention): queries at positions q_begin.., keys at k_begin.., the causal mask and packed
// documents' starts applied by index. Each query row computes only its visible keys' scores (never
// an exponential of a masked one), on raw pointers, (batch row, head) tasks in parallel.
// Callers outside lib/kernels use kernels::block_attention (kernels/kernels.h), which picks it.
#pragma once
#include <ATen/ATen.h>

#include "kernels/attention_block.h"

namespace spmd::kernels::cpu {

// Whether the fused kernels take `block` (every tensor on CPU, float32 with unit last stride,
// int64 starts) and, for the backward, the gradient tensors alike.
bool block_attention_supports(const AttentionBlock& block, const std::vector<at::Tensor>& more = {});

// kernels::block_attention and kernels::block_attention_backward on CPU (same contracts).
BlockAttention fused_block_attention(const AttentionBlock& block);
void fused_block_attention_backward(const AttentionBlock& block, const BlockGradients& g);

}  // namespace spmd::kernels::cpu
