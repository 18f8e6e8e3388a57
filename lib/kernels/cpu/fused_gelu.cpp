// Fused bias + tanh-GELU. gelu(z) = z * s, s = sigmoid(2u), u = k0 (z + k1 z^3);
// gelu'(z) = s + z s (1 - s) 2 k0 (1 + 3 k1 z^2). The forward pass writes gelu'(z) next to y
// (it shares s), so backward is one multiply and keeps no input alive.
#include "kernels/cpu/fused_gelu.h"

#include <algorithm>
#include <cstdint>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "util/error.h"

// Lets GCC if-convert the clamps in exp_approx, so the loops vectorize (see vector_math.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include "kernels/cpu/vector_math.h"

namespace spmd::kernels::cpu {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

inline float sigmoid_2u(float z) {
  const float u = kSqrt2OverPi * (z + kCubic * z * z * z);
  return 1.0f / (1.0f + vecmath::exp_approx(-2.0f * u));
}

template <bool kBias, bool kGrad>
inline void gelu_row(const float* x, const float* bias, float* y, float* grad, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    const float z = kBias ? x[c] + bias[c] : x[c];
    const float s = sigmoid_2u(z);
    y[c] = z * s;
    if constexpr (kGrad) grad[c] = s + z * s * (1.0f - s) * (2.0f * kSqrt2OverPi) * (1.0f + 3.0f * kCubic * z * z);
  }
}

// y[r, c] = gelu(z), z = x[r, c] + bias[c], over rows [r0, r1) of (rows, cols); and, when
// `grad` is not null, grad[r, c] = gelu'(z). bias may be null.
SPMD_VECTOR_CLONES
void gelu_rows(const float* x, const float* bias, float* y, float* grad, int64_t r0, int64_t r1, int64_t cols) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float* gr = grad ? grad + r * cols : nullptr;
    if (bias && grad) gelu_row<true, true>(xr, bias, yr, gr, cols);
    else if (bias) gelu_row<true, false>(xr, bias, yr, gr, cols);
    else if (grad) gelu_row<false, true>(xr, bias, yr, gr, cols);
    else gelu_row<false, false>(xr, bias, yr, gr, cols);
  }
}

// Rows per task: about at::internal::GRAIN_SIZE elements.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1)); }

// y = gelu(x + bias) and, if `grad` is defined, grad = gelu'(x + bias); x contiguous.
void gelu_into(const at::Tensor& x, const at::Tensor& bias, at::Tensor& y, at::Tensor* grad) {
  const int64_t cols = x.size(-1), rows = x.numel() / std::max<int64_t>(cols, 1);
  const float* x_p = x.data_ptr<float>();
  const float* b_p = bias.numel() > 0 ? bias.data_ptr<float>() : nullptr;
  float* y_p = y.data_ptr<float>();
  float* g_p = grad ? grad->data_ptr<float>() : nullptr;
  at::parallel_for(0, rows, row_grain(cols), [&](int64_t r0, int64_t r1) { gelu_rows(x_p, b_p, y_p, g_p, r0, r1, cols); });
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedBiasGelu : torch::autograd::Function<FusedBiasGelu> {
  // No bias is an empty tensor, so every autograd input is a defined tensor.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& bias_in) {
    const at::Tensor x = x_in.contiguous();
    at::Tensor y = at::empty_like(x), grad = at::empty_like(x);
    gelu_into(x, bias_in.contiguous(), y, &grad);
    ctx->save_for_backward({grad});
    ctx->saved_data["has_bias"] = bias_in.numel() > 0;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor dx = grads[0] * ctx->get_saved_variables()[0];
    at::Tensor dbias = ctx->saved_data["has_bias"].toBool() ? dx.reshape({-1, dx.size(-1)}).sum(0) : at::Tensor();
    return {dx, dbias};
  }
};

}  // namespace

bool fused_gelu_supports(const at::Tensor& x, const at::Tensor& bias) {
  const bool x_ok = x.dim() >= 1 && x.device().is_cpu() && x.scalar_type() == at::kFloat;
  if (!x_ok || !bias.defined()) return x_ok;
  return bias.dim() == 1 && bias.size(0) == x.size(-1) && bias.device().is_cpu() && bias.scalar_type() == at::kFloat;
}

at::Tensor fused_bias_gelu(const at::Tensor& x, const at::Tensor& bias) {
  SPMD_ASSERT(fused_gelu_supports(x, bias), "fused_bias_gelu: needs float32 x and bias of size x.size(-1) on CPU; "
              "got bias of {} elements for rows of {}", bias.defined() ? bias.numel() : 0, x.dim() ? x.size(-1) : 0);
  const at::Tensor b = bias.defined() ? bias : at::empty({0}, x.options());
  if (at::GradMode::is_enabled() && (x.requires_grad() || b.requires_grad())) return FusedBiasGelu::apply(x, b);
  const at::Tensor xc = x.contiguous();  // inference: no derivative, no autograd node
  at::Tensor y = at::empty_like(xc);
  gelu_into(xc, b.contiguous(), y, nullptr);
  return y;
}

}  // namespace spmd::kernels::cpu
