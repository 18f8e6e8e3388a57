// fused_linear's autograd node: three parallel_gemm calls and a bias sum.
#include "model/fused_linear.h"

#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "model/cpu_gemm.h"
#include "util/error.h"

namespace spmd {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// w (K, N) as a BLAS operand: row-major (ld N), or stored transposed as (N, K) (ld K).
struct Weight {
  const float* data;
  bool stored_transposed;
  int64_t ld;
};

Weight weight_of(const at::Tensor& w) {
  const bool transposed = !w.is_contiguous();
  return {w.data_ptr<float>(), transposed, transposed ? w.size(0) : w.size(1)};
}

struct FusedLinear : torch::autograd::Function<FusedLinear> {
  // No bias is an empty tensor: 1.13's autograd does not take undefined tensor inputs.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& bias) {
    const at::Tensor x = x_in.contiguous();
    const int64_t M = x.size(0), K = x.size(1), N = w.size(1);
    const Weight wt = weight_of(w);
    at::Tensor y = at::empty({M, N}, x.options());
    cpu::parallel_gemm(false, wt.stored_transposed, M, N, K, 1.f, x.data_ptr<float>(), K, wt.data, wt.ld, 0.f,
                       y.data_ptr<float>(), N);
    if (bias.numel() > 0) y.add_(bias);
    ctx->save_for_backward({x, w});
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const at::Tensor dy = grads[0].contiguous();  // (M, N)
    const int64_t M = x.size(0), K = x.size(1), N = w.size(1);
    const Weight wt = weight_of(w);
    at::Tensor dx, dw, dbias;
    if (ctx->needs_input_grad(0)) {  // dX (M, K) = dY W^T
      dx = at::empty({M, K}, x.options());
      cpu::parallel_gemm(false, !wt.stored_transposed, M, K, N, 1.f, dy.data_ptr<float>(), N, wt.data, wt.ld, 0.f,
                         dx.data_ptr<float>(), K);
    }
    if (ctx->needs_input_grad(1)) {
      if (!wt.stored_transposed) {  // dW (K, N) = X^T dY
        dw = at::empty({K, N}, x.options());
        cpu::parallel_gemm(true, false, K, N, M, 1.f, x.data_ptr<float>(), K, dy.data_ptr<float>(), N, 0.f,
                           dw.data_ptr<float>(), N);
      } else {  // in w's own layout: dW^T (N, K) = dY^T X
        at::Tensor dwt = at::empty({N, K}, x.options());
        cpu::parallel_gemm(true, false, N, K, M, 1.f, dy.data_ptr<float>(), N, x.data_ptr<float>(), K, 0.f,
                           dwt.data_ptr<float>(), K);
        dw = dwt.t();
      }
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) dbias = dy.sum(0);
    return {dx, dw, dbias};
  }
};

}  // namespace

bool fused_linear_supports(const at::Tensor& x, const at::Tensor& w) {
  auto cpu_float_matrix = [](const at::Tensor& t) {
    return t.dim() == 2 && t.device().is_cpu() && t.scalar_type() == at::kFloat;
  };
  return cpu_float_matrix(x) && cpu_float_matrix(w) && x.size(1) == w.size(0) &&
         (w.is_contiguous() || w.t().is_contiguous()) && cpu::has_blas_sgemm();
}

at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  SPMD_ASSERT(fused_linear_supports(x, w), "fused_linear: unsupported operands {} x {}", x.sizes().vec(),
              w.sizes().vec());
  if (bias.defined())
    SPMD_ASSERT(bias.dim() == 1 && bias.size(0) == w.size(1), "fused_linear: bias of {} for {} outputs", bias.numel(),
                w.size(1));
  return FusedLinear::apply(x, w, bias.defined() ? bias : at::empty({0}, x.options()));
}

}  // namespace spmd
