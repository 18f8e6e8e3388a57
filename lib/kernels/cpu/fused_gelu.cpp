// Fused bias + tanh-GELU. gelu(z) = z * s, s = sigmoid(2u), u = k0 (z + k1 z^3);
// gelu'(z) = s + z s (1 - s) 2 k0 (1 + 3 k1 z^2). The forward pass writes gelu'(z) next to y
// (it shares s), so backward is one multiply and keeps no input alive. float32 or bfloat16 storage
// (bf16 matmuls): bf16 is widened to float32 for the arithmetic and rounded (to nearest even) on
// the way out, so a bf16 activation is read and written once.
#include "kernels/cpu/fused_gelu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

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
__attribute__((always_inline)) inline void gelu_row(const float* x, const float* bias, float* y, float* grad,
                                                    int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    const float z = kBias ? x[c] + bias[c] : x[c];
    const float s = sigmoid_2u(z);
    y[c] = z * s;
    if constexpr (kGrad) grad[c] = s + z * s * (1.0f - s) * (2.0f * kSqrt2OverPi) * (1.0f + 3.0f * kCubic * z * z);
  }
}

// bf16 rows (raw bits) a chunk at a time: widened into float32 buffers, the float32 loop, rounded
// back. Same bits as one fused loop, but GCC vectorizes the arithmetic 16 floats wide instead of 32
// bf16 values at a time, which spilled registers and ran 2.4x slower than float32 (bench_kernels).
template <bool kBias, bool kGrad>
__attribute__((always_inline)) inline void gelu_row(const uint16_t* x, const uint16_t* bias, uint16_t* y,
                                                    uint16_t* grad, int64_t cols) {
  constexpr int64_t kChunk = 512;
  alignas(64) float xf[kChunk], bf[kChunk], yf[kChunk], gf[kChunk];
  for (int64_t c0 = 0; c0 < cols; c0 += kChunk) {
    const int64_t n = std::min(kChunk, cols - c0);
    for (int64_t c = 0; c < n; ++c) xf[c] = vecmath::bf16_to_float(x[c0 + c]);
    if constexpr (kBias)
      for (int64_t c = 0; c < n; ++c) bf[c] = vecmath::bf16_to_float(bias[c0 + c]);
    gelu_row<kBias, kGrad>(xf, bf, yf, gf, n);
    for (int64_t c = 0; c < n; ++c) y[c0 + c] = vecmath::float_to_bf16(yf[c]);
    if constexpr (kGrad)
      for (int64_t c = 0; c < n; ++c) grad[c0 + c] = vecmath::float_to_bf16(gf[c]);
  }
}

// y[r, c] = gelu(z), z = x[r, c] + bias[c], over rows [r0, r1) of (rows, cols); and, when
// `grad` is not null, grad[r, c] = gelu'(z). bias may be null.
// Forced inline: each clone below must get its own vectorized copy of the loop (GCC does not
// inline a function this size into a target_clones body by itself; called out of line it runs
// the default target's scalar code, ~2x slower).
template <typename T>
__attribute__((always_inline)) inline void gelu_rows_of(const T* x, const T* bias, T* y, T* grad, int64_t r0, int64_t r1, int64_t cols) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T* gr = grad ? grad + r * cols : nullptr;
    if (bias && grad) gelu_row<true, true>(xr, bias, yr, gr, cols);
    else if (bias) gelu_row<true, false>(xr, bias, yr, gr, cols);
    else if (grad) gelu_row<false, true>(xr, bias, yr, gr, cols);
    else gelu_row<false, false>(xr, bias, yr, gr, cols);
  }
}
// One clone set per storage type (target_clones does not take templates).
SPMD_VECTOR_CLONES
void gelu_rows(const float* x, const float* bias, float* y, float* grad, int64_t r0, int64_t r1, int64_t cols) {
  gelu_rows_of(x, bias, y, grad, r0, r1, cols);
}
SPMD_VECTOR_CLONES
void gelu_rows(const uint16_t* x, const uint16_t* bias, uint16_t* y, uint16_t* grad, int64_t r0, int64_t r1,
               int64_t cols) {
  gelu_rows_of(x, bias, y, grad, r0, r1, cols);
}

// Rows per task: about at::internal::GRAIN_SIZE elements.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1)); }

// T's elements of t (float, or bf16's bits).
template <typename T>
T* elements(const at::Tensor& t) {
  if constexpr (std::is_same_v<T, float>) return t.data_ptr<float>();
  else return reinterpret_cast<T*>(t.data_ptr<at::BFloat16>());
}

// y = gelu(x + bias) and, if `grad` is defined, grad = gelu'(x + bias); x contiguous.
template <typename T>
void gelu_into_of(const at::Tensor& x, const at::Tensor& bias, at::Tensor& y, at::Tensor* grad) {
  const int64_t cols = x.size(-1), rows = x.numel() / std::max<int64_t>(cols, 1);
  const T* x_p = elements<T>(x);
  const T* b_p = bias.numel() > 0 ? elements<T>(bias) : nullptr;
  T* y_p = elements<T>(y);
  T* g_p = grad ? elements<T>(*grad) : nullptr;
  at::parallel_for(0, rows, row_grain(cols), [&](int64_t r0, int64_t r1) { gelu_rows(x_p, b_p, y_p, g_p, r0, r1, cols); });
}
void gelu_into(const at::Tensor& x, const at::Tensor& bias, at::Tensor& y, at::Tensor* grad) {
  if (x.scalar_type() == at::kBFloat16) gelu_into_of<uint16_t>(x, bias, y, grad);
  else gelu_into_of<float>(x, bias, y, grad);
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
  const bool x_ok = x.dim() >= 1 && x.device().is_cpu() &&
                    (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16);
  if (!x_ok || !bias.defined()) return x_ok;
  return bias.dim() == 1 && bias.size(0) == x.size(-1) && bias.device().is_cpu() &&
         bias.scalar_type() == x.scalar_type();
}

at::Tensor fused_bias_gelu(const at::Tensor& x, const at::Tensor& bias) {
  SPMD_ASSERT(fused_gelu_supports(x, bias), "fused_bias_gelu: needs float32 or bf16 x and bias of size x.size(-1) on CPU; "
              "got bias of {} elements for rows of {}", bias.defined() ? bias.numel() : 0, x.dim() ? x.size(-1) : 0);
  const at::Tensor b = bias.defined() ? bias : at::empty({0}, x.options());
  if (at::GradMode::is_enabled() && (x.requires_grad() || b.requires_grad())) return FusedBiasGelu::apply(x, b);
  const at::Tensor xc = x.contiguous();  // inference: no derivative, no autograd node
  at::Tensor y = at::empty_like(xc);
  gelu_into(xc, b.contiguous(), y, nullptr);
  return y;
}

}  // namespace spmd::kernels::cpu
