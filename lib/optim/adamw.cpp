// AdamW with decoupled weight decay.
#include "optim/adamw.h"

#include <cmath>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/_fused_adamw.h>

#include "kernels/kernels.h"

namespace spmd {

AdamW::AdamW(std::vector<at::Tensor> params, std::vector<bool> decay, const TrainConfig& config)
    : params_(std::move(params)), decay_(std::move(decay)), beta1_(config.beta1), beta2_(config.beta2),
      weight_decay_(config.weight_decay) {
  for (const auto& p : params_) {  // undefined: another pipeline stage's parameter, no state here
    exp_avg_.push_back(p.defined() ? at::zeros_like(p) : at::Tensor());
    exp_avg_sq_.push_back(p.defined() ? at::zeros_like(p) : at::Tensor());
  }
}

void AdamW::step(double lr, double grad_scale) {
  at::NoGradGuard no_grad;
  ++steps_;
  kernels::AdamWScalars s;
  s.lr = lr;
  s.beta1 = beta1_;
  s.beta2 = beta2_;
  s.eps = eps_;
  s.bias1 = 1.0 - std::pow(beta1_, static_cast<double>(steps_));
  s.bias2 = 1.0 - std::pow(beta2_, static_cast<double>(steps_));
  s.grad_scale = grad_scale;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].defined()) continue;
    const at::Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    s.weight_decay = decay_[i] && weight_decay_ > 0 ? weight_decay_ : 0.0;
    kernels::adamw_update(params_[i], g, exp_avg_[i], exp_avg_sq_[i], s);  // fused on CPU float32
  }
}

void AdamW::step_on_device(double lr, const at::Tensor& grad_scale, const at::Tensor& apply) {
  at::NoGradGuard no_grad;
  // libtorch's fused AdamW: one kernel per group of parameters on CUDA instead of ~20 and no
  // full-size temporaries. It divides each gradient by `grad_scale` (in place) and leaves
  // everything unchanged where `found_inf` is 1; it reads the step count, we advance it.
  if (!device_steps_.defined())
    device_steps_ = at::full({}, static_cast<double>(steps_), apply.options().dtype(at::kFloat));
  device_steps_.add_(apply.to(at::kFloat));
  const at::Tensor inverse_scale = grad_scale.reciprocal().to(at::kFloat);
  const at::Tensor skip = at::logical_not(apply).to(at::kFloat);
  for (const bool decayed : {true, false}) {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].defined() || !params_[i].grad().defined()) continue;
      if ((decay_[i] && weight_decay_ > 0) != decayed) continue;
      params.push_back(params_[i]);
      grads.push_back(params_[i].grad());
      exp_avgs.push_back(exp_avg_[i]);
      exp_avg_sqs.push_back(exp_avg_sq_[i]);
      steps.push_back(device_steps_);  // read only: one counter serves every parameter
    }
    if (params.empty()) continue;
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1_, beta2_,
                      decayed ? weight_decay_ : 0.0, eps_, /*amsgrad=*/false, /*maximize=*/false, inverse_scale,
                      skip);
    // The fused kernel writes the parameters without bumping their version counters (torch 2.15):
    // bump them as an in-place op would, or copies keyed on the version (the bf16 weights of
    // parallel/param_cast_cache.h) keep the weights of the step they were cast at.
    for (const at::Tensor& p : params) p.unsafeGetTensorImpl()->bump_version();
  }
}

int64_t AdamW::steps_taken() const {
  return device_steps_.defined() ? static_cast<int64_t>(device_steps_.item<double>()) : steps_;
}

void AdamW::set_steps_taken(int64_t steps) {
  steps_ = steps;
  device_steps_ = at::Tensor();  // step_on_device starts again from steps_
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i)
    if (exp_avg_[i].defined()) bytes += (exp_avg_[i].numel() + exp_avg_sq_[i].numel()) * static_cast<int64_t>(exp_avg_[i].element_size());
  return bytes;
}

}  // namespace spmd
