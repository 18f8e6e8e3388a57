// Validation of executable layouts, process-group creation, sharded initialization.
#include "parallel/sharded_model.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "parallel/counter_rng.h"
#include "parallel/grad_sync.h"
#include "util/error.h"

namespace spmd {

ShardedModel::ShardedModel(ModelLayout layout, Communicator& comm, uint64_t seed)
    : layout_(std::move(layout)), comm_(&comm) {
  validate_layout();
  create_groups();
  const int64_t rank = comm.rank();
  for (const auto& p : layout_.params) {
    if (!p.sharding.holds(rank)) {  // another pipeline stage's
      params_.emplace_back();
      continue;
    }
    at::Tensor local = at::empty(p.sharding.shard_shape(), at::kFloat);
    auto offset = p.sharding.shard_offset(rank);
    switch (p.info.init) {
      case ParamInit::kNormal:
        fill_normal_block(local, p.info.shape, offset, seed, stream_id(p.info.name), p.info.init_std);
        break;
      case ParamInit::kZeros: local.zero_(); break;
      case ParamInit::kOnes: local.fill_(1.0f); break;
    }
    // Padding rows (the table's padded dim) start (and stay) zero.
    if (const int64_t d = p.info.padded_dim; d >= 0) {
      const int64_t first_pad = std::max<int64_t>(p.info.unpadded_size - offset[static_cast<size_t>(d)], 0);
      if (first_pad < local.size(d)) local.narrow(d, first_pad, local.size(d) - first_pad).zero_();
    }
    // Drawn on the CPU (the counter-based generator), then placed on the rank's device once.
    params_.push_back(local.to(comm.device()).set_requires_grad(true));
  }
  // FSDP units: a block's weights (the table's layer), the weights outside the stack (layer -1).
  std::vector<FsdpGathers> gathers;
  std::vector<int64_t> layers;
  for (size_t i = 0; i < params_.size(); ++i) {
    gathers.push_back(fsdp_gathers(i));
    layers.push_back(layout_.params[i].info.layer);
  }
  prefetcher_ = std::make_unique<FsdpPrefetcher>(params_, gathers, layers);
}

FsdpGathers ShardedModel::fsdp_gathers(size_t i) const {
  const ParamLayout& layout = layout_.params[i];
  FsdpGathers gathers;
  for (size_t d = 0; d < layout.fsdp_axes.size(); ++d) {
    if (layout.fsdp_axes[d].empty()) continue;
    const Group& g = comm_->along(layout.fsdp_axes[d]);
    if (g.size() > 1) gathers.emplace_back(static_cast<int64_t>(d), &g);
  }
  return gathers;
}

void ShardedModel::validate_layout() const {
  for (const auto& p : layout_.params) {
    for (size_t d = 0; d < p.info.shape.size(); ++d) {
      const auto& logical = p.info.logical[d];
      SPMD_CHECK(p.fsdp_axes[d].empty() || p.tp_axes[d].empty(),
                 "{}: dim {} ('{}') is sharded over both batch axes {} and other axes {}; shard a dim either "
                 "FSDP-style (over batch axes) or tensor-parallel, not both",
                 p.info.name, d, logical, p.fsdp_axes[d], p.tp_axes[d]);
      // The `expert` dim stays local too (expert parallelism: the tokens travel to it).
      bool tp_ok = logical == "vocab" || logical == "heads" || logical == "mlp" || logical == "expert";
      SPMD_CHECK(tp_ok || p.tp_axes[d].empty(),
                 "{}: logical axis '{}' maps to mesh axes {} that do not shard the batch; tensor parallelism "
                 "is supported on 'heads', 'mlp' and 'vocab' only. Map '{}' to null or to a batch axis (FSDP)",
                 p.info.name, logical.empty() ? "-" : logical, p.tp_axes[d], logical);
    }
    if (p.info.input_dims > 0) {
      auto in_tp = p.input_tp_axes(), out_tp = p.output_tp_axes();
      SPMD_CHECK(in_tp.empty() || out_tp.empty(),
                 "{}: both its input dims ({}) and output dims ({}) are tensor-parallel; a layer may be "
                 "column- or row-parallel, not both",
                 p.info.name, in_tp, out_tp);
    }
  }
}

void ShardedModel::create_groups() {
  // Every rank creates the same groups in the same order.
  auto& comm = *comm_;
  comm.create_group(layout_.batch_axes);
  comm.create_group(layout_.context_axes);
  comm.create_group(layout_.token_axes());
  if (layout_.model.moe.enabled()) comm.create_group(layout_.routing_axes());
  for (const auto& axis : layout_.mesh.axes()) comm.create_group({axis});
  if (!layout_.pipeline.axis.empty()) comm.create_host_group({layout_.pipeline.axis});  // stage-to-stage traffic
  for (const auto& p : layout_.params) {
    comm.create_group(p.input_tp_axes());
    comm.create_group(p.output_tp_axes());
    for (size_t d = 0; d < p.info.shape.size(); ++d) {
      comm.create_group(p.fsdp_axes[d]);
      comm.create_group(p.tp_axes[d]);
      comm.create_group(p.sharding.spec().axes_of(d));
    }
    comm.create_group(gradient_sum_axes(layout_, p));
    comm.create_exchange_group(p.expert_axes);
  }
}

size_t ShardedModel::index_of(const std::string& name) const {
  for (size_t i = 0; i < layout_.params.size(); ++i)
    if (layout_.params[i].info.name == name) return i;
  throw RuntimeError("no parameter named " + name);
}

bool ShardedModel::holds(size_t i) const { return params_[i].defined(); }

at::Tensor ShardedModel::gather_full(size_t i) const {
  const auto& sharding = layout_.params[i].sharding;
  at::Tensor t;
  // The spec's groups lie inside one stage: every member holds the parameter.
  if (holds(i)) t = gather_shards(i, params_[i].detach());
  if (const auto& placed = sharding.placement(); !placed.everywhere()) {
    if (!t.defined()) t = at::empty(sharding.global_shape(), at::TensorOptions().dtype(at::kFloat).device(comm_->device()));
    comm_->along({placed.axis}).broadcast(t, static_cast<int>(placed.indices.front()));
  }
  return t.contiguous();
}

at::Tensor ShardedModel::gather_shards(size_t i, at::Tensor block) const {
  const auto& sharding = layout_.params[i].sharding;
  block = block.contiguous();
  for (size_t d = 0; d < sharding.global_shape().size(); ++d)
    block = comm_->along(sharding.spec().axes_of(d)).all_gather(block, static_cast<int64_t>(d)).contiguous();
  return block;
}

int64_t ShardedModel::local_param_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : params_)
    if (p.defined()) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  return bytes;
}

}  // namespace spmd
