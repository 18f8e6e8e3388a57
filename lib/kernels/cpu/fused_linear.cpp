// fused_linear's autograd node (three parallel_gemm calls and a bias sum) and its autograd-free products.
#include "kernels/cpu/fused_linear.h"

#include <algorithm>

#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/cpu/cpu_gemm.h"
#include "util/error.h"

namespace spmd::kernels::cpu {

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

at::Tensor gemm_forward(const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& bias) {
  const at::Tensor x = x_in.contiguous();
  const int64_t M = x.size(0), K = x.size(1), N = w.size(1);
  const Weight wt = weight_of(w);
  at::Tensor y = at::empty({M, N}, x.options());
  parallel_gemm(false, wt.stored_transposed, M, N, K, 1.f, x.data_ptr<float>(), K, wt.data, wt.ld, 0.f,
                     y.data_ptr<float>(), N);
  if (bias.defined()) y.add_(bias);
  return y;
}

// dY as the products read it: its rows in place where each is contiguous (a column block of a wider
// gradient, as a side-by-side product's slice gives it), else a contiguous copy.
at::Tensor rows_in_place(const at::Tensor& dy) {
  return dy.stride(1) == 1 && dy.stride(0) >= dy.size(1) ? dy : dy.contiguous();
}

// dW = X^T dY + beta dW, in dW's layout: row-major (K, N), or the transpose of a row-major (N, K)
// (then dW^T = dY^T X + beta dW^T).
void weight_grad_gemm(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& dw, float beta) {
  const int64_t M = x.size(0), K = x.size(1), N = dy.size(1);
  const Weight d = weight_of(dw);
  if (!d.stored_transposed)
    parallel_gemm(true, false, K, N, M, 1.f, x.data_ptr<float>(), K, dy.data_ptr<float>(), dy.stride(0), beta,
                  dw.data_ptr<float>(), N);
  else
    parallel_gemm(true, false, N, K, M, 1.f, dy.data_ptr<float>(), dy.stride(0), x.data_ptr<float>(), K, beta,
                  dw.data_ptr<float>(), K);
}

LinearGrads gemm_backward(const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& dy_in, bool need_dx,
                          bool need_dw) {
  const at::Tensor x = x_in.contiguous();
  const at::Tensor dy = rows_in_place(dy_in);  // (M, N)
  const int64_t M = x.size(0), K = x.size(1), N = w.size(1);
  const Weight wt = weight_of(w);
  LinearGrads g;
  if (need_dx) {  // dX (M, K) = dY W^T
    g.dx = at::empty({M, K}, x.options());
    parallel_gemm(false, !wt.stored_transposed, M, K, N, 1.f, dy.data_ptr<float>(), dy.stride(0), wt.data, wt.ld, 0.f,
                       g.dx.data_ptr<float>(), K);
  }
  if (need_dw) {
    g.dw = wt.stored_transposed ? at::empty({N, K}, x.options()).t() : at::empty({K, N}, x.options());
    weight_grad_gemm(x, dy, g.dw, 0.f);
  }
  return g;
}

struct FusedLinear : torch::autograd::Function<FusedLinear> {
  // No bias is an empty tensor, so every autograd input is a defined tensor.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& bias) {
    const at::Tensor x = x_in.contiguous();
    ctx->save_for_backward({x, w});
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    return gemm_forward(x, w, bias.numel() > 0 ? bias : at::Tensor());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const bool need_dbias = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2);
    LinearGrads g = gemm_backward(saved[0], saved[1], grads[0], ctx->needs_input_grad(0), ctx->needs_input_grad(1));
    if (need_dbias) g.dbias = grads[0].sum(0);
    return {g.dx, g.dw, g.dbias};
  }
};

// x (M, K) times weights W_i (K, N_i) side by side -> Y (M, sum N_i). The forward is one product on
// the weights copied side by side (one wide product beats several narrow ones); the backward reads
// dY's column blocks in place: dX = sum_i dY_i W_i^T accumulated in one buffer, and each dW_i =
// X^T dY_i written alone, so no gradient is sliced out of a wider one and copied again.
// Up to kMaxSideBySide weights as separate autograd inputs (a list argument would not be one); an
// absent one is an empty tensor.
constexpr size_t kMaxSideBySide = 3;
struct SideBySideLinear : torch::autograd::Function<SideBySideLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w0, const at::Tensor& w1,
                            const at::Tensor& w2) {
    const at::Tensor x = x_in.contiguous();
    variable_list saved{x};  // x, then the weights present
    for (const at::Tensor& w : {w0, w1, w2})
      if (w.numel() > 0) saved.push_back(w);
    ctx->save_for_backward(saved);
    return gemm_forward(x, at::cat(at::TensorList(saved).slice(1), 1), at::Tensor());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const variable_list weights(saved.begin() + 1, saved.end());
    const at::Tensor dy = grads[0].contiguous();
    const int64_t M = x.size(0), K = x.size(1), ld = dy.size(1);
    variable_list out(kMaxSideBySide + 1);
    if (ctx->needs_input_grad(0)) out[0] = at::empty({M, K}, x.options());
    int64_t offset = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
      const at::Tensor& w = weights[i];
      const int64_t N = w.size(1);
      const float* dy_i = dy.data_ptr<float>() + offset;
      if (out[0].defined())  // dX (+)= dY_i W_i^T
        parallel_gemm(false, true, M, K, N, 1.f, dy_i, ld, w.data_ptr<float>(), N, i == 0 ? 0.f : 1.f,
                      out[0].data_ptr<float>(), K);
      if (ctx->needs_input_grad(i + 1)) {  // dW_i = X^T dY_i
        out[i + 1] = at::empty({K, N}, x.options());
        parallel_gemm(true, false, K, N, M, 1.f, x.data_ptr<float>(), K, dy_i, ld, 0.f, out[i + 1].data_ptr<float>(),
                      N);
      }
      offset += N;
    }
    return out;
  }
};

}  // namespace

bool fused_linear_supports(const at::Tensor& x, const at::Tensor& w) {
  auto cpu_float_matrix = [](const at::Tensor& t) {
    return t.dim() == 2 && t.device().is_cpu() && t.scalar_type() == at::kFloat;
  };
  return cpu_float_matrix(x) && cpu_float_matrix(w) && x.size(1) == w.size(0) &&
         (w.is_contiguous() || w.t().is_contiguous()) && has_blas_sgemm();
}

at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  SPMD_ASSERT(fused_linear_supports(x, w), "fused_linear: unsupported operands {} x {}", x.sizes().vec(),
              w.sizes().vec());
  if (bias.defined())
    SPMD_ASSERT(bias.dim() == 1 && bias.size(0) == w.size(1), "fused_linear: bias of {} for {} outputs", bias.numel(),
                w.size(1));
  return FusedLinear::apply(x, w, bias.defined() ? bias : at::empty({0}, x.options()));
}

at::Tensor fused_linear_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  return gemm_forward(x, w, bias);
}

LinearGrads fused_linear_backward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& dy, bool need_dx,
                                  bool need_dw) {
  return gemm_backward(x, w, dy, need_dx, need_dw);
}

void fused_accumulate_weight_grad(const at::Tensor& dw, const at::Tensor& x, const at::Tensor& dy) {
  SPMD_ASSERT(fused_linear_supports(x, dw) && dy.dim() == 2 && dy.size(0) == x.size(0) && dy.size(1) == dw.size(1),
              "fused_accumulate_weight_grad: unsupported operands dw {} x {} dy {}", dw.sizes().vec(),
              x.sizes().vec(), dy.sizes().vec());
  weight_grad_gemm(x.contiguous(), rows_in_place(dy), dw, 1.f);
}

bool side_by_side_linear_supports(const at::Tensor& x, const std::vector<at::Tensor>& weights) {
  return !weights.empty() && weights.size() <= kMaxSideBySide && std::all_of(weights.begin(), weights.end(), [&](const at::Tensor& w) {
    return fused_linear_supports(x, w) && w.is_contiguous();
  });
}

at::Tensor side_by_side_linear(const at::Tensor& x, const std::vector<at::Tensor>& weights) {
  SPMD_ASSERT(side_by_side_linear_supports(x, weights), "side_by_side_linear: unsupported operands, x {}",
              x.sizes().vec());
  const at::Tensor absent = at::empty({0}, x.options());
  return SideBySideLinear::apply(x, weights[0], weights.size() > 1 ? weights[1] : absent,
                                 weights.size() > 2 ? weights[2] : absent);
}

}  // namespace spmd::kernels::cpu
