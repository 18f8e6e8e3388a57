// Expert parallelism's exchange (docs/experts.md): rows sent to the members of a group in
// variable numbers by all-to-all, and back. An autograd Function: the backward is the same
// exchange reversed (the gradient of each received row goes home to its sender).
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "comm/group.h"

namespace spmd {

// What each member sends to each: counts[src * members + dst] rows, the same matrix on every
// member (expert_dispatch.h gathers it).
struct ExchangePlan {
  int64_t members = 1, me = 0;
  std::vector<int64_t> counts;
  std::vector<int64_t> sends() const;     // mine to each member
  std::vector<int64_t> receives() const;  // each member's to me
  int64_t rows_from(int64_t src, int64_t dst) const { return counts[static_cast<size_t>(src * members + dst)]; }
};

// x's rows (dim 0) in member order, plan.sends()[j] to member j -> the rows received, in member
// order. Autograd-aware; the gradient returns by the reverse exchange.
at::Tensor exchange_rows(const at::Tensor& x, const ExchangePlan& plan, const Group& group);

// Wall time this process has spent in expert parallelism's collectives (the rows' all-to-alls,
// both ways, and the counts' all-gathers), in ns: benchmarks read differences (bench_train).
int64_t expert_exchange_time_ns();
void add_expert_exchange_time_ns(int64_t ns);

}  // namespace spmd
