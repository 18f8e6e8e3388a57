// The LM head and its cross-entropy in chunks of rows: logits = x table^T against this rank's
// columns of the vocabulary, a softmax whose max and sum-exp are reduced across the vocab group
// (Megatron's vocab-parallel cross-entropy; a group of one is the whole vocabulary), padding
// columns (global id >= valid_vocab) excluded. No (rows, vocab) tensor outlives a chunk: the
// training form computes each chunk's gradients as it goes (softmax - one-hot, times x or the
// table) and keeps only the gradients of x (N, C) and of the table for its backward; nothing of
// the logits, the softmax or x is saved.
#pragma once
#include <cstdint>

#include <ATen/ATen.h>

#include "comm/group.h"
#include "parallel/fsdp_prefetch.h"
#include "parallel/head_chunks.h"

namespace spmd {


// Where this rank's table sits and how the head computes.
struct HeadShard {
  int64_t vocab_offset = 0;         // the global id of the table's first row
  int64_t valid_vocab = 0;          // ids >= this are padding, masked out of the softmax
  const Group* vocab_group = nullptr;  // the members holding the other columns, in order
  // FSDP: the all-gathers that make the (V_local, C) table from the stored shard; its gradient is
  // reduce-scattered back in the forward, by a collective of its own, so that only the shard's
  // gradient waits for backward. Empty: stored whole. With a prefetcher, the table is weight
  // `fsdp_index` of its unit (fsdp_prefetch.h), gathered with the unit, whose gather was started
  // ahead; without, gathered on the spot.
  FsdpGathers gathers;
  FsdpPrefetcher* prefetcher = nullptr;
  size_t fsdp_index = 0;
  at::ScalarType operand_dtype = at::kFloat;  // the products' operands (model.matmul_dtype)
  // Where defined: the stored (V_local, C) table already in operand_dtype (bf16 matmuls: the copy
  // made once per optimizer update); else the table (or its gather) is cast at each call.
  at::Tensor operand_table;
  int64_t chunk_rows = 0;           // 0: head_chunk_rows(V_local, rows, on a GPU)
};

// Mean cross-entropy over the N rows of x (N, C) (float32, or bf16 activations with a bf16
// operand_dtype: the products in bf16, the log-softmax, the loss and the table's gradient in
// float32, x's gradient in x's dtype) against targets (N,) int64 global ids, as a
// scalar on every member of the group; a negative target scores nothing (its row adds 0 to the
// sum, which is still divided by N). Gradients flow to x and to `table` (the stored table, or its
// FSDP shard).
at::Tensor head_cross_entropy(const at::Tensor& x, const at::Tensor& table, const at::Tensor& targets,
                              const HeadShard& head);

// The same cross-entropy per row without gradients: (N,) float, 0 where the target is negative.
at::Tensor head_token_losses(const at::Tensor& x, const at::Tensor& table, const at::Tensor& targets,
                             const HeadShard& head);

}  // namespace spmd
