#include "alltoall/expert_dispatch.h"

#include <chrono>

#include "util/error.h"

namespace spmd {

namespace {
// Every member's per-expert counts: (members, E) on the host.
std::vector<std::vector<int64_t>> gather_expert_counts(const std::vector<int64_t>& counts, const Group& group,
                                                       c10::Device device) {
  const auto start = std::chrono::steady_clock::now();
  const at::Tensor all = group.all_gather(at::tensor(counts, at::kLong).to(device), 0).to(at::kCPU);
  add_expert_exchange_time_ns(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  const int64_t* p = all.data_ptr<int64_t>();
  const auto experts = static_cast<int64_t>(counts.size());
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(group.size()));
  for (size_t m = 0; m < out.size(); ++m) out[m].assign(p + static_cast<int64_t>(m) * experts, p + static_cast<int64_t>(m + 1) * experts);
  return out;
}
}  // namespace

ExpertDispatch plan_expert_dispatch(const std::vector<int64_t>& expert_counts, const Group& group,
                                    c10::Device device) {
  const int64_t members = group.size(), me = group.rank();
  const auto experts = static_cast<int64_t>(expert_counts.size());
  SPMD_ASSERT(experts % members == 0, "{} experts over {} members", experts, members);
  const int64_t local = experts / members;
  const auto counts = gather_expert_counts(expert_counts, group, device);  // counts[src][e]
  ExpertDispatch d;
  d.plan.members = members;
  d.plan.me = me;
  for (int64_t src = 0; src < members; ++src)
    for (int64_t dst = 0; dst < members; ++dst) {
      int64_t rows = 0;
      for (int64_t e = dst * local; e < (dst + 1) * local; ++e) rows += counts[static_cast<size_t>(src)][static_cast<size_t>(e)];
      d.plan.counts.push_back(rows);
    }
  // Arrival: sender by sender, each sender's rows by my experts in order. Wanted: expert by
  // expert, each expert's rows sender by sender.
  std::vector<int64_t> start_of(static_cast<size_t>(members * local));  // arrival offset of (src, e)
  int64_t offset = 0;
  for (int64_t src = 0; src < members; ++src)
    for (int64_t e = 0; e < local; ++e) {
      start_of[static_cast<size_t>(src * local + e)] = offset;
      offset += counts[static_cast<size_t>(src)][static_cast<size_t>(me * local + e)];
    }
  std::vector<int64_t> regroup;
  regroup.reserve(static_cast<size_t>(offset));
  d.local_counts.assign(static_cast<size_t>(local), 0);
  for (int64_t e = 0; e < local; ++e)
    for (int64_t src = 0; src < members; ++src) {
      const int64_t n = counts[static_cast<size_t>(src)][static_cast<size_t>(me * local + e)];
      for (int64_t i = 0; i < n; ++i) regroup.push_back(start_of[static_cast<size_t>(src * local + e)] + i);
      d.local_counts[static_cast<size_t>(e)] += n;
    }
  d.regroup = at::tensor(regroup, at::kLong).to(device);
  d.ungroup = at::empty_like(d.regroup);
  d.ungroup.index_put_({d.regroup}, at::arange(offset, d.regroup.options()));
  return d;
}

at::Tensor dispatch_to_experts(const at::Tensor& rows, const ExpertDispatch& d, const Group& group) {
  return exchange_rows(rows, d.plan, group).index_select(0, d.regroup);
}

at::Tensor return_from_experts(const at::Tensor& rows, const ExpertDispatch& d, const Group& group) {
  ExchangePlan back = d.plan;  // the same matrix transposed: what I received goes back to its sender
  for (int64_t src = 0; src < back.members; ++src)
    for (int64_t dst = 0; dst < back.members; ++dst)
      back.counts[static_cast<size_t>(src * back.members + dst)] = d.plan.rows_from(dst, src);
  return exchange_rows(rows.index_select(0, d.ungroup), back, group);
}

}  // namespace spmd
