// torch.optim.Muon's update, op for op (torch/optim/_muon.py, PyTorch 2.9 and later).
#include "muon/muon_update.h"

#include <algorithm>
#include <cmath>

#include <ATen/core/grad_mode.h>

#include "util/error.h"

namespace spmd {

at::Tensor muon_momentum_update(at::Tensor& buf, const at::Tensor& grad, const MuonConfig& config) {
  buf.lerp_(grad, 1 - config.momentum);
  return config.nesterov ? grad.lerp(buf, config.momentum) : buf;
}

at::Tensor newton_schulz(const at::Tensor& matrix, const MuonConfig& config) {
  SPMD_ASSERT(matrix.dim() == 2 && config.ns_coefficients.size() == 3, "newton_schulz: a 2-D matrix and (a, b, c)");
  at::NoGradGuard no_grad;
  const double a = config.ns_coefficients[0], b = config.ns_coefficients[1], c = config.ns_coefficients[2];
  const at::ScalarType dtype = config.ns_dtype == MatmulDtype::kFloat32 ? at::kFloat : at::kBFloat16;
  at::Tensor x = matrix.to(dtype, /*non_blocking=*/false, /*copy=*/true);
  const bool tall = matrix.size(0) > matrix.size(1);  // iterate on the wide side: the Gram matrix is smaller
  if (tall) x = x.t();
  x.div_(at::linalg_vector_norm(x, 2).clamp_min(config.eps));  // spectral norm at most 1
  for (int64_t k = 0; k < config.ns_steps; ++k) {
    const at::Tensor gram = at::matmul(x, x.t());
    const at::Tensor gram_update = at::addmm(gram, gram, gram, /*beta=*/b, /*alpha=*/c);
    x = at::addmm(x, gram_update, x, /*beta=*/a);
  }
  return tall ? x.t() : x;
}

double muon_adjusted_lr(double lr, MuonAdjustLr fn, int64_t rows, int64_t cols) {
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  switch (fn) {
    case MuonAdjustLr::kOriginal: return lr * std::sqrt(std::max(1.0, r / c));
    case MuonAdjustLr::kMatchRmsAdamW: return lr * (0.2 * std::sqrt(std::max(r, c)));
  }
  return lr;
}

void muon_apply(at::Tensor& param, const at::Tensor& ortho, double lr, double adjusted_lr, double weight_decay) {
  at::NoGradGuard no_grad;
  param.mul_(1 - lr * weight_decay);
  param.add_(ortho, -adjusted_lr);
}

void muon_matrix_step(at::Tensor& param, const at::Tensor& grad, at::Tensor& buf, double lr, const MuonConfig& config) {
  at::NoGradGuard no_grad;
  const at::Tensor update = muon_momentum_update(buf, grad, config);
  const at::Tensor ortho = newton_schulz(update, config);
  muon_apply(param, ortho, lr, muon_adjusted_lr(lr, config.adjust_lr_fn, param.size(0), param.size(1)),
             config.weight_decay);
}

}  // namespace spmd
