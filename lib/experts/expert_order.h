// Tokens in expert order and back: each token's k (token, slot) rows sorted by the expert they
// reach (stable: within an expert, in token order), so each expert's rows are one contiguous
// block for one product.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace spmd {

struct ExpertOrder {
  at::Tensor rows;                // (N * k,) int64: the (token * k + slot) row at each sorted place
  at::Tensor tokens;              // (N * k,) int64: its token, rows / k
  at::Tensor inverse;             // (N * k,) int64: the sorted place of each (token, slot) row
  std::vector<int64_t> counts;    // (E) rows per expert, in expert order
};

// choice (N, k) int64 expert ids in [0, experts).
ExpertOrder sort_by_expert(const at::Tensor& choice, int64_t experts);

// The inverse of a permutation given as int64 indices.
at::Tensor inverse_permutation(const at::Tensor& order);

}  // namespace spmd
