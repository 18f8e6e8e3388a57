// AdamW with decoupled weight decay, and the learning-rate schedule.
#include "optim/adamw.h"

#include <cmath>

#include <ATen/core/grad_mode.h>

namespace spmd {

AdamW::AdamW(std::vector<at::Tensor> params, std::vector<bool> decay, const TrainConfig& config)
    : params_(std::move(params)), decay_(std::move(decay)), beta1_(config.beta1), beta2_(config.beta2),
      weight_decay_(config.weight_decay) {
  for (const auto& p : params_) {
    exp_avg_.push_back(at::zeros_like(p));
    exp_avg_sq_.push_back(at::zeros_like(p));
  }
}

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++steps_;
  const double bias1 = 1.0 - std::pow(beta1_, static_cast<double>(steps_));
  const double bias2 = 1.0 - std::pow(beta2_, static_cast<double>(steps_));
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (decay_[i] && weight_decay_ > 0) p.mul_(1.0 - lr * weight_decay_);
    exp_avg_[i].mul_(beta1_).add_(g, 1.0 - beta1_);
    exp_avg_sq_[i].mul_(beta2_).addcmul_(g, g, 1.0 - beta2_);
    at::Tensor denom = (exp_avg_sq_[i] / bias2).sqrt_().add_(eps_);
    p.addcdiv_(exp_avg_[i], denom, -lr / bias1);
  }
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i)
    bytes += (exp_avg_[i].numel() + exp_avg_sq_[i].numel()) * static_cast<int64_t>(exp_avg_[i].element_size());
  return bytes;
}

double learning_rate_at(const TrainConfig& c, int64_t step) {
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps + 1);
  if (step > c.decay_steps) return c.min_lr;
  double span = static_cast<double>(std::max<int64_t>(c.decay_steps - c.warmup_steps, 1));
  double ratio = static_cast<double>(step - c.warmup_steps) / span;
  double coeff = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return c.min_lr + coeff * (c.lr - c.min_lr);
}

}  // namespace spmd
