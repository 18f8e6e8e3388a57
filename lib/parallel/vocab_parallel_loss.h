// Cross-entropy over logits whose vocab dim is sharded across a group (Megatron's
// vocab-parallel cross-entropy): max and sum-exp are reduced across the group, so no rank
// ever holds the full softmax. Columns at global index >= valid_vocab (padding) are excluded.
#pragma once
#include <ATen/ATen.h>

#include "comm/group.h"

namespace spmd {

// logits: (N, V_local) float, this rank's columns [vocab_offset, vocab_offset + V_local).
// targets: (N,) int64 global ids < valid_vocab. Returns the mean loss over N (a scalar) on every
// member of the group; its gradient flows to `logits`.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab_offset,
                                        int64_t valid_vocab, const Group& group);

// The same cross-entropy per row, without gradients: (N,) float, 0 where the target is negative
// (a position that is not scored).
at::Tensor vocab_parallel_token_losses(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab_offset,
                                       int64_t valid_vocab, const Group& group);

}  // namespace spmd
