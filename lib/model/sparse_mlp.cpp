#include "model/sparse_mlp.h"

#include <fmt/format.h>

#include "experts/expert_order.h"
#include "experts/expert_products.h"
#include "experts/router.h"

namespace spmd {

at::Tensor ModelOps::routed_experts(const at::Tensor& x, const at::Tensor& choice, const at::Tensor& weights,
                                    const std::string& prefix) {
  const int64_t C = x.size(-1), k = choice.size(-1);
  const at::Tensor gate = param(prefix + ".gate");
  const ExpertOrder order = sort_by_expert(choice.reshape({-1, k}), gate.size(0));
  const at::Tensor rows = x.reshape({-1, C}).index_select(0, order.tokens);  // (N * k, C) by expert
  const at::Tensor out = grouped_swiglu_experts(rows, order.counts, gate, param(prefix + ".up"),
                                                param(prefix + ".down"), x.scalar_type());
  const at::Tensor slots = out.index_select(0, order.inverse).view({-1, k, C});  // (N, k, C)
  return (slots * weights.reshape({-1, k, 1})).sum(1).view(x.sizes());
}

at::Tensor sparse_mlp(const ModelConfig& c, const at::Tensor& x, int64_t layer, ModelOps& ops) {
  const std::string p = fmt::format("h.{}.moe", layer);
  const int64_t k = c.moe.num_experts_per_tok, E = c.moe.num_experts;
  const at::Tensor logits = ops.dense(x, p + ".router.weight", "", 1);  // (B, T, E)
  const std::string bias = p + ".router.choice_bias";  // auxiliary-loss-free balancing's
  const Routing r = route_tokens(logits.reshape({-1, E}), k, c.moe.norm_topk_prob,
                                 ops.has_param(bias) ? ops.param(bias).detach() : at::Tensor());
  std::vector<int64_t> routed_shape = x.sizes().vec();
  routed_shape.back() = k;
  at::Tensor y = ops.routed_experts(x, r.choice.view(routed_shape), r.weights.view(routed_shape), p + ".experts");
  y = ops.balance_experts(y, layer, r.probs, r.choice);
  if (c.moe.shared_expert_intermediate_size == 0) return y;
  const at::Tensor gate_up = ops.dense_concat(x, {p + ".shared.gate.weight", p + ".shared.up.weight"}, 1);
  const at::Tensor shared = ops.dense(ops.swiglu(gate_up), p + ".shared.down.weight", "", 1);
  const at::Tensor open = at::sigmoid(ops.dense(x, p + ".shared_gate.weight", "", 1).to(at::kFloat));  // (B, T, 1)
  return y + open * shared.to(at::kFloat);
}

}  // namespace spmd
