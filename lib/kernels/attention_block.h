// The operands of one block of attention (kernels::block_attention): a range of queries against a
// range of keys, as ring attention computes them and merges them by their log-sum-exp.
#pragma once
#include <ATen/ATen.h>

namespace spmd::kernels {

// Queries q (B, H, n, D) at positions q_begin .. q_begin + n - 1 over keys and values k, v
// (B, H, m, D) at positions k_begin .. k_begin + m - 1 (views are fine). Query i sees key j when
// k_begin + j <= q_begin + i and, with q_document_starts ((B, n) int64, non-decreasing along a row:
// packed documents), when k_begin + j >= q_document_starts[b, i]. dropout_mask: undefined, or
// (B, H, n, m) multipliers of the probabilities.
struct AttentionBlock {
  at::Tensor q, k, v;
  int64_t q_begin = 0, k_begin = 0;
  at::Tensor dropout_mask, q_document_starts;
};

// out (B, H, n, D): the softmax of Q K^T / sqrt(D) over each query's visible keys, times the
// dropout mask, times V; zero for a query that sees no key. lse (B, H, n, 1): the log-sum-exp of
// the visible scores, -inf for a query that sees none.
struct BlockAttention {
  at::Tensor out, lse;
};

// The backward of a block inside a whole attention: d_out (B, H, n, D) the gradient of the whole
// output, lse (B, H, n, 1) the whole log-sum-exp of each query, row_dot (B, H, n, 1) the row sums
// of d_out times the whole output. dq, dk, dv: shaped as the block's q, k, v (views are fine),
// accumulated in place.
struct BlockGradients {
  at::Tensor d_out, lse, row_dot, dq, dk, dv;
};

}  // namespace spmd::kernels
