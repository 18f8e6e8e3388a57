// A dense layer on CPU as one autograd node: y = x W (+ b), with the forward product and both
// backward products (dX = dY W^T, dW = X^T dY) each split over the intra-op threads by rows or
// columns, every thread running a single-threaded sgemm (cpu::parallel_gemm). On two cores this
// beats the BLAS's own threading of these small matrices, which spends a pass zeroing C and
// hands off threads inside every call. test_fused_linear checks it against at::mm/at::addmm.
// Callers outside lib/kernels use kernels::dense_product / linear_forward / linear_backward.
#pragma once
#include <vector>

#include <ATen/ATen.h>

#include "kernels/kernels.h"

namespace spmd::kernels::cpu {

// Whether fused_linear takes (x, w): float32 CPU matrices, w row-major or the transpose of a
// row-major matrix, and the process's BLAS sgemm found. Otherwise use at::mm / at::addmm.
bool fused_linear_supports(const at::Tensor& x, const at::Tensor& w);

// x: (rows, K); w: (K, N), contiguous or w.t() contiguous (a tied (N, K) embedding as the LM
// head); bias: (N) or undefined. Returns (rows, N).
at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias = at::Tensor());

// x (rows, K) times up to 3 weights (K, N_i), each contiguous, side by side -> (rows, sum N_i), one
// autograd node: the forward one product on the weights copied side by side, the backward's
// products on dY's column blocks in place (dX summed over them, each weight's gradient alone).
bool side_by_side_linear_supports(const at::Tensor& x, const std::vector<at::Tensor>& weights);
at::Tensor side_by_side_linear(const at::Tensor& x, const std::vector<at::Tensor>& weights);

// The same products without autograd (operands as fused_linear_supports takes them).
at::Tensor fused_linear_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);
// dx, dw where asked for (dw in w's layout); dbias is left to the caller.
LinearGrads fused_linear_backward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& dy, bool need_dx,
                                  bool need_dw);
// dw += x^T dy in dw's layout (dw as fused_linear_supports takes a w).
void fused_accumulate_weight_grad(const at::Tensor& dw, const at::Tensor& x, const at::Tensor& dy);

}  // namespace spmd::kernels::cpu
