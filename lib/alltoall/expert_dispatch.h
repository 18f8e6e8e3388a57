// Expert parallelism's dispatch (docs/experts.md): each member's rows, sorted by global expert,
// go to the member holding their expert (experts split into contiguous blocks over the group),
// arrive grouped by that member's local experts for one product each, and return home the same
// way reversed. Counts first (an all-gather of each member's per-expert counts), then the rows.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "alltoall/token_exchange.h"
#include "comm/group.h"

namespace spmd {

struct ExpertDispatch {
  ExchangePlan plan;                  // rows per (sender, receiver)
  std::vector<int64_t> local_counts;  // rows per local expert once they arrived
  at::Tensor regroup;                 // arrival order -> local-expert order (int64 indices)
  at::Tensor ungroup;                 // its inverse
};

// expert_counts: this member's rows per global expert (E, a multiple of the group's size).
// Collective over `group` (tensors on `device`).
ExpertDispatch plan_expert_dispatch(const std::vector<int64_t>& expert_counts, const Group& group,
                                    c10::Device device);

// Rows in global expert order -> the rows this member's experts get, grouped by local expert.
at::Tensor dispatch_to_experts(const at::Tensor& rows, const ExpertDispatch& d, const Group& group);
// The experts' outputs (local-expert order) -> back to their senders, in the senders' order.
at::Tensor return_from_experts(const at::Tensor& rows, const ExpertDispatch& d, const Group& group);

}  // namespace spmd
