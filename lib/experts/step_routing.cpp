#include "experts/step_routing.h"

#include "util/error.h"

namespace spmd {

RoutingTally::RoutingTally(int64_t layers, int64_t experts, c10::Device device)
    : counts(at::zeros({layers, experts}, at::TensorOptions().dtype(at::kDouble).device(device))),
      prob_sums(at::zeros({layers, experts}, at::TensorOptions().dtype(at::kDouble).device(device))) {}

void RoutingTally::record(int64_t layer, const at::Tensor& probs, const at::Tensor& choice) {
  const int64_t experts = counts.size(1);
  counts[layer].copy_(at::bincount(choice.reshape({-1}), {}, experts));
  prob_sums[layer].copy_(probs.detach().sum(0));
}

RoutingTally& RoutingTally::operator+=(const RoutingTally& other) {
  counts += other.counts;
  prob_sums += other.prob_sums;
  return *this;
}

RoutingTally RoutingTally::clone() const {
  RoutingTally copy = *this;
  copy.counts = counts.clone();
  copy.prob_sums = prob_sums.clone();
  return copy;
}

StepRouting::StepRouting(std::vector<int64_t> sparse_layers, int64_t tokens, double coef, double gradient_scale,
                         int64_t expert_devices)
    : sparse_layers_(std::move(sparse_layers)),
      rows_(static_cast<double>(sparse_layers_.size()) * static_cast<double>(tokens)), coef_(coef),
      gradient_scale_(gradient_scale), expert_devices_(expert_devices) {}

void StepRouting::settle(RoutingTally tally) {
  tally_ = std::move(tally);
  const double experts = static_cast<double>(tally_->counts.size(1));
  // aux = E / rows^2 * sum_e C_e * S_e: its gradient in S is E * C / rows^2.
  prob_sum_gradient_ =
      (tally_->counts.sum(0) * (coef_ * experts * gradient_scale_ / (rows_ * rows_))).to(at::kFloat);
}

const at::Tensor& StepRouting::prob_sum_gradient() const {
  SPMD_ASSERT(settled(), "the balancing loss's gradient was asked for before the step's routing was known");
  return prob_sum_gradient_;
}

double StepRouting::aux_loss() const {
  const double experts = static_cast<double>(tally_->counts.size(1));
  const at::Tensor f = tally_->counts.sum(0) / rows_, p = tally_->prob_sums.sum(0) / rows_;
  return experts * (f * p).sum().item<double>();
}

std::vector<StepRouting::Load> StepRouting::loads() const {
  std::vector<Load> out;
  const at::Tensor counts = tally_->counts.to(at::kCPU);
  for (int64_t layer : sparse_layers_) {
    const at::Tensor c = counts[layer];
    const double mean = c.mean().item<double>();
    const double max = c.max().item<double>();
    out.push_back({layer, c.min().item<double>(), max, mean > 0 ? max / mean : 0.0});
    if (expert_devices_ > 1 && mean > 0) {
      const at::Tensor per_device = c.view({expert_devices_, -1}).sum(1);
      out.back().device_max_over_mean = per_device.max().item<double>() / per_device.mean().item<double>();
    }
  }
  return out;
}

}  // namespace spmd
