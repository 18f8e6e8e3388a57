// ParallelOps' sparse layers (docs/experts.md): tokens to the ranks holding their experts by
// all-to-all over the `expert` dim's mesh axes, tensor parallelism within an expert over its
// `mlp` dim's, and the load-balancing loss's gradient attached where the layer's output is.
#include <torch/autograd.h>

#include "alltoall/expert_dispatch.h"
#include "comm/collectives.h"
#include "experts/expert_order.h"
#include "experts/expert_products.h"
#include "parallel/parallel_ops.h"

namespace spmd {

namespace {
// y passes through; the layer's summed router probabilities receive the balancing loss's
// gradient, which is linear in them and known once the step's routing is (StepRouting).
struct BalancingGradient : torch::autograd::Function<BalancingGradient> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y, const at::Tensor& prob_sums,
                            const StepRouting* step) {
    ctx->saved_data["step"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(step));
    return y.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* step = reinterpret_cast<const StepRouting*>(static_cast<intptr_t>(ctx->saved_data["step"].toInt()));
    return {grads[0], step->prob_sum_gradient(), at::Tensor()};
  }
};
}  // namespace

at::Tensor ParallelOps::balance_experts(const at::Tensor& y, int64_t layer, const at::Tensor& probs,
                                        const at::Tensor& choice) {
  const ModelConfig& m = model_.layout().model;
  if (!pass_routing_) pass_routing_ = std::make_unique<RoutingTally>(m.n_layer, m.moe.num_experts, y.device());
  pass_routing_->record(layer, probs, choice);
  if (!step_routing_ || step_routing_->coef() == 0 || !at::GradMode::is_enabled()) return y;
  return BalancingGradient::apply(y, probs.sum(0), step_routing_);
}

at::Tensor ParallelOps::routed_experts(const at::Tensor& x, const at::Tensor& choice, const at::Tensor& weights,
                                       const std::string& prefix) {
  const ParamLayout& gate = layout_of(prefix + ".gate");
  const Group& experts = model_.comm().exchange_along(gate.expert_axes);  // expert parallelism
  const Group& within = group(gate.tp_axes[2]);     // tensor parallelism within each expert (its mlp dim)
  const int64_t C = x.size(-1), k = choice.size(-1), E = gate.info.shape[0];
  const at::ScalarType operands = matmul_dtype();
  // Every member of a tensor-parallel group computes its slice of each expert for the same
  // tokens: under sequence parallelism the whole sequence's (routed where each position lives).
  at::Tensor tokens = x, routed = choice;
  const bool whole_sequence = within.size() > 1 && sequence_parallel();
  if (within.size() > 1) {
    tokens = column_input(x, gate.tp_axes[2]);  // as a column-parallel product's input
    if (whole_sequence) routed = within.all_gather(choice, 1);
  }
  const ExpertOrder order = sort_by_expert(routed.reshape({-1, k}), E);
  at::Tensor rows = tokens.reshape({-1, C}).to(operands).index_select(0, order.tokens);  // (N * k, C) by expert
  std::vector<int64_t> counts = order.counts;
  ExpertDispatch dispatch;
  if (experts.size() > 1) {
    dispatch = plan_expert_dispatch(order.counts, experts, x.device());
    rows = dispatch_to_experts(rows, dispatch, experts);
    counts = dispatch.local_counts;
  }
  at::Tensor out = grouped_swiglu_experts(rows, counts, matmul_param(prefix + ".gate"), matmul_param(prefix + ".up"),
                                          matmul_param(prefix + ".down"), operands);
  if (experts.size() > 1) out = return_from_experts(out, dispatch, experts);
  std::vector<int64_t> slots_shape = tokens.sizes().vec();  // (B, T, k, C): each token's k outputs
  slots_shape.back() = k;
  slots_shape.push_back(C);
  at::Tensor slots = out.index_select(0, order.inverse).view(slots_shape);
  // Within an expert each member holds a partial sum (its slice of the mlp dim): summed before
  // the weights mix them, so the router's gradient sees the whole outputs.
  if (within.size() > 1)
    slots = whole_sequence ? reduce_scatter_sequence_to_group(slots, within) : reduce_from_group(slots, within);
  return (slots * weights.unsqueeze(-1)).sum(-2);
}

}  // namespace spmd
