// Which parameters take Muon, the matrix each one is to torch (its nn.Linear's weight), and the
// rank that orthogonalises it. A function of the layout alone: every rank computes the same.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "config/config.h"
#include "model/params.h"
#include "muon/takes_muon.h"
#include "parallel/layout.h"

namespace spmd {

// One Muon matrix: parameter `param`, seen as nn.Linear's (rows, cols) = (out_features,
// in_features), orthogonalised by member `owner` of its stage's group.
struct MuonMatrix {
  size_t param = 0;
  int64_t rows = 0, cols = 0;
  double cost = 0;  // Newton-Schulz flops
  int64_t owner = 0;
};

// Newton-Schulz flops of a (rows, cols) matrix over `steps` iterations (on the wide side, r <= c):
// per iteration X X^T (2 r^2 c), the Gram update (2 r^3), and the product with X (2 r^2 c).
double newton_schulz_flops(int64_t rows, int64_t cols, int64_t steps);

// The Muon matrices among `layout`'s parameters held on `rank`'s pipeline stage, their owners
// spread over `group_size` ranks by cost: largest first, each to the least-loaded member (ties:
// the lowest), so each member's Newton-Schulz work is about 1/group_size of the stage's.
std::vector<MuonMatrix> plan_muon_matrices(const ModelLayout& layout, int64_t rank, int64_t group_size,
                                           int64_t ns_steps);

// A weight stored input-major ([input dims..., output dims...], x @ W) as nn.Linear holds it:
// (out_features, in_features), contiguous. from_linear is its inverse, into `stored_shape`.
at::Tensor as_linear(const at::Tensor& stored, int64_t input_dims);
at::Tensor from_linear(const at::Tensor& linear, at::IntArrayRef stored_shape);

}  // namespace spmd
