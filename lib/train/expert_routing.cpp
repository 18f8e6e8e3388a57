#include "train/expert_routing.h"

#include <fmt/format.h>

#include "comm/communicator.h"
#include "parallel/stage_link.h"

namespace spmd {

std::unique_ptr<StepRouting> new_step_routing(const TrainState& s) {
  const ModelConfig& m = s.config.model;
  if (!m.moe.enabled()) return nullptr;
  const ModelLayout& layout = s.model->layout();
  const double gradient_scale = static_cast<double>(layout.token_split() * s.config.train.microbatches);
  return std::make_unique<StepRouting>(m.sparse_layers(), s.config.data.batch_size * m.block_size,
                                       m.moe.router_aux_loss_coef, gradient_scale, layout.expert_devices());
}

bool routes_ahead(const TrainState& s) {
  if (!s.config.model.moe.enabled() || s.config.model.moe.router_aux_loss_coef == 0) return false;
  return s.config.train.microbatches > 1 || s.model->layout().pipeline.virtual_stages() > 1;
}

RoutingTally empty_routing_tally(const TrainState& s) {
  return RoutingTally(s.config.model.n_layer, s.config.model.moe.num_experts, s.comm->device());
}

void settle_step_routing(const TrainState& s, const RoutingTally& tally, StepRouting& step) {
  RoutingTally whole = tally.clone();
  const Group& group = s.model->comm().along(s.model->layout().routing_axes());
  group.all_reduce_sum(whole.counts);
  group.all_reduce_sum(whole.prob_sums);
  step.settle(std::move(whole));
}

void move_expert_biases(TrainState& s, const at::Tensor& counts) {
  const MoeConfig& moe = s.config.model.moe;
  if (moe.expert_bias_update_rate == 0 || !counts.defined()) return;
  at::NoGradGuard no_grad;
  for (int64_t layer : s.config.model.sparse_layers()) {
    const size_t k = s.model->index_of(fmt::format("h.{}.moe.router.choice_bias", layer));
    if (!s.model->holds(k)) continue;  // another stage's layer
    const at::Tensor load = counts[layer];
    s.model->params()[k].add_(at::sign(load.mean() - load).to(at::kFloat), moe.expert_bias_update_rate);
  }
}

}  // namespace spmd
