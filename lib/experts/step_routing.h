// The routing of a whole step, summed over every token of the global batch (all ranks,
// microbatches and pipeline stages), per sparse layer: what the load-balancing loss and the load
// statistics read, so that every mesh gives one process's numbers (docs/experts.md).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ATen.h>

namespace spmd {

// Routing on this rank: per layer of the model, the (token, slot) rows each expert got and the
// summed router probabilities. float64, no gradient.
struct RoutingTally {
  at::Tensor counts;     // (n_layer, E); rows of dense layers stay 0
  at::Tensor prob_sums;  // (n_layer, E)
  RoutingTally(int64_t layers, int64_t experts, c10::Device device);
  // Layer `layer`'s routing in one forward (probs (N, E) float32, choice (N, k)), in place of what
  // the row held: a forward recomputed in backward records the same again.
  void record(int64_t layer, const at::Tensor& probs, const at::Tensor& choice);
  RoutingTally& operator+=(const RoutingTally& other);
  RoutingTally clone() const;
};

// transformers' load_balancing_loss_func over every sparse layer and every token of the step:
// E * sum_e f_e * P_e, f_e the share of the (token, slot) rows of all layers routed to e (over
// L * N rows), P_e the mean router probability of e over the L * N (token, layer) rows.
class StepRouting {
 public:
  // `sparse_layers`: the model's; `tokens`: the step's N; `coef`: model.moe.router_aux_loss_coef;
  // `gradient_scale`: what the gradient sync divides by (the token split times the microbatches),
  // given back so that the loss's gradient is the whole step's; `expert_devices`: the devices the
  // experts are split over, each holding a contiguous run of them (1: none).
  StepRouting(std::vector<int64_t> sparse_layers, int64_t tokens, double coef, double gradient_scale,
              int64_t expert_devices = 1);

  // The step's whole tally (every rank's tokens summed), before any backward reads it.
  void settle(RoutingTally tally);
  bool settled() const { return tally_.has_value(); }

  double aux_loss() const;  // the unweighted balancing loss
  double coef() const { return coef_; }
  // d(coef * aux) / d(a pass's summed router probabilities of one layer), times gradient_scale:
  // (E,) float32 (aux is linear in them).
  const at::Tensor& prob_sum_gradient() const;
  // Per sparse layer, in order: the tokens each expert got, min, max and max over mean; with the
  // experts split over devices, the rows each device's experts got, max over mean (from the step's
  // global counts: over several all-to-all groups, their mean; 0 without a split).
  struct Load {
    int64_t layer;
    double min, max, max_over_mean;
    double device_max_over_mean = 0;
  };
  std::vector<Load> loads() const;
  // (n_layer, E) float64: the (token, slot) rows each expert of each layer got in the step.
  const at::Tensor& counts() const { return tally_->counts; }

 private:
  std::vector<int64_t> sparse_layers_;
  double rows_;  // L * N
  double coef_, gradient_scale_;
  int64_t expert_devices_;
  std::optional<RoutingTally> tally_;
  at::Tensor prob_sum_gradient_;
};

}  // namespace spmd
