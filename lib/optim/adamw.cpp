// AdamW with decoupled weight decay, and the learning-rate schedule.
#include "optim/adamw.h"

#include <cmath>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include "model/vector_math.h"

namespace spmd {

namespace {

struct UpdateScalars {
  float grad_scale, decay_factor, beta1, one_minus_beta1, beta2, one_minus_beta2, bias2, eps, step_size;
};

// The whole update in one pass over a float32 CPU tensor (p, g, m, v read once, p, m, v written
// once), where the op-by-op form below makes about eight passes. Same operations, same order.
SPMD_VECTOR_CLONES
void update_range(float* p, const float* g, float* m, float* v, int64_t begin, int64_t end, const UpdateScalars& s) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i] * s.grad_scale;
    const float mi = m[i] * s.beta1 + gi * s.one_minus_beta1;
    const float vi = v[i] * s.beta2 + gi * gi * s.one_minus_beta2;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * s.decay_factor + s.step_size * (mi / (std::sqrt(vi / s.bias2) + s.eps));
  }
}

void fused_update(float* p, const float* g, float* m, float* v, int64_t n, const UpdateScalars& s) {
  at::parallel_for(0, n, 16384, [&](int64_t begin, int64_t end) { update_range(p, g, m, v, begin, end, s); });
}

bool fusable(const at::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous(); }

}  // namespace

AdamW::AdamW(std::vector<at::Tensor> params, std::vector<bool> decay, const TrainConfig& config)
    : params_(std::move(params)), decay_(std::move(decay)), beta1_(config.beta1), beta2_(config.beta2),
      weight_decay_(config.weight_decay) {
  for (const auto& p : params_) {
    exp_avg_.push_back(at::zeros_like(p));
    exp_avg_sq_.push_back(at::zeros_like(p));
  }
}

void AdamW::step(double lr, double grad_scale) {
  at::NoGradGuard no_grad;
  ++steps_;
  const double bias1 = 1.0 - std::pow(beta1_, static_cast<double>(steps_));
  const double bias2 = 1.0 - std::pow(beta2_, static_cast<double>(steps_));
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    at::Tensor g = p.grad();
    if (!g.defined()) continue;
    const bool decay = decay_[i] && weight_decay_ > 0;
    if (fusable(p) && fusable(g) && fusable(exp_avg_[i]) && fusable(exp_avg_sq_[i])) {
      const UpdateScalars s{static_cast<float>(grad_scale),
                            decay ? static_cast<float>(1.0 - lr * weight_decay_) : 1.0f,
                            static_cast<float>(beta1_),
                            static_cast<float>(1.0 - beta1_),
                            static_cast<float>(beta2_),
                            static_cast<float>(1.0 - beta2_),
                            static_cast<float>(bias2),
                            static_cast<float>(eps_),
                            static_cast<float>(-lr / bias1)};
      fused_update(p.data_ptr<float>(), g.data_ptr<float>(), exp_avg_[i].data_ptr<float>(),
                   exp_avg_sq_[i].data_ptr<float>(), p.numel(), s);
      continue;
    }
    if (grad_scale != 1.0) g = g * grad_scale;
    if (decay) p.mul_(1.0 - lr * weight_decay_);
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
