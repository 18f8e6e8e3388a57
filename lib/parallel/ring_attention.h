// Ring attention over the context axes (runtime.context_exchange: ring; docs/context-parallel.md):
// each member's keys and values travel once around the ring while every member attends its
// head-tail queries over the blocks it holds, merging the blocks' softmaxes by their log-sum-exp
// (the online softmax of flash attention). Only the (chunk x chunk) blocks the causal mask leaves
// visible are computed, and nothing of size (T/cp, T) is kept for backward: the backward replays
// each block's probabilities from the saved log-sum-exp while the keys and values, and their
// gradients, go around the ring again. Mesh-free: the members are a Group, a member's chunks a
// ContextSplit.
#pragma once
#include <ATen/ATen.h>

#include "comm/group.h"
#include "parallel/context_parallel.h"

namespace spmd {

// Causal attention of this member's queries over every member's keys and values: q, k, v are
// (B, T_local, H, D), this member's two head-tail chunks of the sequence. dropout_mask: undefined,
// or (B, H, T_local, T) multipliers of the probabilities (rows: this member's query positions;
// columns: every key position in order). q_document_starts: undefined, or (B, T_local) int64, the
// global position where each of this member's queries' document starts (packed documents): a
// query then sees only its own document's keys, and blocks sharing no document are skipped.
// Autograd: gradients for q, k and v. (B, T_local, H, D).
at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dropout_mask,
                          const Group& group, const ContextSplit& split,
                          const at::Tensor& q_document_starts = at::Tensor());

}  // namespace spmd
