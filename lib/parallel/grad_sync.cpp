// Data-parallel gradient averaging and global-norm computation.
#include "parallel/grad_sync.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace spmd {

namespace {
// Batch axes over which parameter p is replicated (the data-parallel replicas of its gradient).
std::vector<std::string> replicated_batch_axes(const ModelLayout& layout, const ParamLayout& p) {
  std::vector<std::string> axes = layout.batch_axes;
  for (const auto& dims : p.fsdp_axes)
    for (const auto& a : dims) axes.erase(std::find(axes.begin(), axes.end(), a));
  return axes;
}
}  // namespace

void sync_gradients(ShardedModel& model) {
  const auto& layout = model.layout();
  auto& params = model.params();
  // One flat buffer per group: one all-reduce per group instead of one per tensor.
  std::map<std::vector<std::string>, std::vector<size_t>> buckets;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) params[i].mutable_grad() = at::zeros_like(params[i]);
    buckets[replicated_batch_axes(layout, layout.params[i])].push_back(i);
  }
  const double scale = 1.0 / static_cast<double>(layout.dp_size());
  for (auto& [axes, members] : buckets) {
    const Group& group = model.comm().along(axes);
    if (group.size() > 1) {
      std::vector<at::Tensor> flat;
      for (size_t i : members) flat.push_back(params[i].grad().reshape({-1}));
      at::Tensor buffer = at::cat(flat);
      group.all_reduce_sum(buffer);
      int64_t at_offset = 0;
      for (size_t i : members) {
        at::Tensor g = params[i].mutable_grad();
        g.copy_(buffer.narrow(0, at_offset, g.numel()).view_as(g));
        at_offset += g.numel();
      }
    }
    for (size_t i : members) params[i].mutable_grad().mul_(scale);
  }
}

double global_grad_norm(const ShardedModel& model) {
  const auto& layout = model.layout();
  const int64_t rank = model.comm().rank();
  at::Tensor total = at::zeros({1}, at::kDouble);
  for (size_t i = 0; i < model.params().size(); ++i) {
    if (!layout.params[i].sharding.is_primary_replica(rank)) continue;
    const at::Tensor& g = model.params()[i].grad();
    if (g.defined()) total += g.to(at::kDouble).pow(2).sum();
  }
  model.comm().world().all_reduce_sum(total);
  return std::sqrt(total.item<double>());
}

}  // namespace spmd
