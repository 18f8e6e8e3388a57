// torch.optim.Muon's update of one whole matrix as nn.Linear holds it (out_features,
// in_features), in its pieces: the momentum (elementwise, so it runs on any shard), the
// Newton-Schulz orthogonalisation (the whole matrix only), and the decayed, scaled step (on any
// shard). Each piece is the same libtorch ops in the same order as torch/optim/_muon.py.
#pragma once
#include <cstdint>

#include <ATen/ATen.h>

#include "config/config.h"

namespace spmd {

// buf.lerp_(grad, 1 - momentum); returns what is orthogonalised: grad.lerp(buf, momentum) with
// Nesterov, else buf itself.
at::Tensor muon_momentum_update(at::Tensor& buf, const at::Tensor& grad, const MuonConfig& config);

// _zeropower_via_newtonschulz in config.ns_dtype: a copy in that dtype, transposed when tall,
// divided by its Frobenius norm (at least eps), ns_steps quintic iterations. `matrix` is 2-D.
at::Tensor newton_schulz(const at::Tensor& matrix, const MuonConfig& config);

// _adjust_lr for a (rows, cols) = (out_features, in_features) matrix: original lr * sqrt(max(1,
// rows / cols)); match_rms_adamw 0.2 * lr * sqrt(max(rows, cols)).
double muon_adjusted_lr(double lr, MuonAdjustLr fn, int64_t rows, int64_t cols);

// param.mul_(1 - lr * weight_decay); param.add_(ortho, -adjusted_lr): decoupled decay with the
// unadjusted lr, then the step. `param` and `ortho` are the same block of the matrix.
void muon_apply(at::Tensor& param, const at::Tensor& ortho, double lr, double adjusted_lr, double weight_decay);

// One whole step of torch.optim.Muon on a (rows, cols) matrix and its gradient: the three pieces.
void muon_matrix_step(at::Tensor& param, const at::Tensor& grad, at::Tensor& buf, double lr, const MuonConfig& config);

}  // namespace spmd
