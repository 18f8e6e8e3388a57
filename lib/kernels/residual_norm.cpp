// kernels::residual_norm (kernels.h): the op's autograd node: the forward keeps the sum, the row statistics and the weight; the
// backward hands the residual's gradient (d_sum) to x, its copy in the branch's dtype to delta.
#include "kernels/kernels.h"

#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/cpu/fused_rms_norm.h"
#include "kernels/cuda_module.h"
#include "kernels/gpu_stand_ins.h"
#include "util/error.h"

namespace spmd::kernels {

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The GPU kernels hold a block's weight-gradient partials in shared memory: 2 C floats.
constexpr int64_t kMaxKernelColumns = 4096;

bool on_gpu_kernel(const at::Tensor& x) { return x.is_cuda() && x.size(1) <= kMaxKernelColumns; }

gpu_stand_in::ResidualNormForward forward_rows(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                               const at::Tensor& bias, double eps, bool rms, at::ScalarType out_dtype) {
  if (!on_gpu_kernel(x)) return gpu_stand_in::residual_norm_forward(x, delta, weight, bias, eps, rms, out_dtype);
  gpu_stand_in::ResidualNormForward f{delta.defined() ? at::empty_like(x) : x,
                                      at::empty(x.sizes(), x.options().dtype(out_dtype)),
                                      at::empty({x.size(0)}, x.options()), at::empty({x.size(0)}, x.options())};
  spmd::cuda::module().residual_norm_forward(x, delta, weight, bias, eps, rms, f.sum, f.normed, f.mean, f.rstd);
  return f;
}

gpu_stand_in::ResidualNormBackward backward_rows(const at::Tensor& sum, const at::Tensor& weight,
                                                 const at::Tensor& mean, const at::Tensor& rstd,
                                                 const at::Tensor& d_normed, const at::Tensor& d_sum_in, bool rms,
                                                 at::ScalarType delta_dtype) {
  if (!on_gpu_kernel(sum))
    return gpu_stand_in::residual_norm_backward(sum, weight, mean, rstd, d_normed, d_sum_in, rms, delta_dtype);
  const bool has_delta = delta_dtype != at::ScalarType::Undefined;
  gpu_stand_in::ResidualNormBackward b{at::empty_like(sum),
                                       has_delta ? at::empty(sum.sizes(), sum.options().dtype(delta_dtype)) : at::Tensor(),
                                       at::Tensor(), at::Tensor()};
  spmd::cuda::module().residual_norm_backward(sum, weight, mean, rstd, d_normed, d_sum_in, rms, b.d_sum, b.d_delta,
                                              b.d_weight, b.d_bias);
  return b;
}

// Optional inputs come in as empty tensors (autograd takes no undefined input).
at::Tensor present(const at::Tensor& t) { return t.numel() > 0 ? t : at::Tensor(); }

struct ResidualNormFunction : torch::autograd::Function<ResidualNormFunction> {
  // x, delta: (rows, C) contiguous, or delta empty (none: the sum is x itself). {sum, normed}.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& delta_in,
                               const at::Tensor& weight, const at::Tensor& bias, double eps, bool rms,
                               at::ScalarType out_dtype) {
    const at::Tensor delta = present(delta_in);
    const auto f = forward_rows(x, delta, weight, present(bias), eps, rms, out_dtype);
    ctx->save_for_backward({f.sum, weight, f.mean, f.rstd});
    ctx->saved_data["rms"] = rms;
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    ctx->saved_data["delta_dtype"] =
        static_cast<int64_t>(delta.defined() ? delta.scalar_type() : at::ScalarType::Undefined);
    return {f.sum, f.normed};  // without a delta the sum is x: autograd makes it a view, no copy
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto delta_dtype = static_cast<at::ScalarType>(ctx->saved_data["delta_dtype"].toInt());
    const at::Tensor d_sum_in = grads[0].defined() ? grads[0].contiguous() : at::Tensor();
    const at::Tensor d_normed = grads[1].defined() ? grads[1].contiguous() : at::zeros_like(saved[0]);
    const auto b = backward_rows(saved[0], saved[1], saved[2], saved[3], d_normed, d_sum_in,
                                 ctx->saved_data["rms"].toBool(), delta_dtype);
    return {b.d_sum, b.d_delta, b.d_weight, ctx->saved_data["has_bias"].toBool() ? b.d_bias : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

ResidualNormed residual_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                             const at::Tensor& bias, double eps, bool rms, at::ScalarType out_dtype) {
  SPMD_ASSERT(x.scalar_type() == at::kFloat && (!delta.defined() || x.sizes() == delta.sizes()) && weight.dim() == 1 &&
                  weight.size(0) == x.size(-1) && weight.scalar_type() == at::kFloat,
              "residual_norm: float32 x {} and delta of its shape (or none), a float32 weight of its width, got "
              "weight {}",
              x.sizes().vec(), weight.sizes().vec());
  if (rms && !bias.defined() && !takes_generic_path(x.device()) &&
      cpu::fused_rms_norm_supports(x, delta, weight, out_dtype)) {
    const auto r = cpu::fused_residual_rms_norm(x, delta, weight, eps, out_dtype);
    return {r.sum, r.normed};
  }
  const int64_t C = x.size(-1);
  const at::Tensor none = at::empty({0}, weight.options());
  const auto out = ResidualNormFunction::apply(x.reshape({-1, C}).contiguous(),
                                               delta.defined() ? delta.reshape({-1, C}).contiguous() : none, weight,
                                               bias.defined() ? bias : none, eps, rms, out_dtype);
  return {out[0].view(x.sizes()), out[1].view(x.sizes())};
}

}  // namespace spmd::kernels
