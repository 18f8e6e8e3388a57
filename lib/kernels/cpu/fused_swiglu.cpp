// SwiGLU, y = g s u with s = sigmoid(g) = 1 / (1 + exp(-g)) (one exp_approx per element), and back:
// dg = dy u s (1 + g (1 - s)), du = dy g s. bf16 storage is widened to float32 and rounded on the
// way out (to nearest even).
#include "kernels/cpu/fused_swiglu.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "util/error.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include "kernels/cpu/storage_types.h"

namespace spmd::kernels::cpu {

namespace {

inline float sigmoid_of(float g) { return 1.0f / (1.0f + vecmath::exp_approx(-g)); }

template <typename T>
__attribute__((always_inline)) inline void swiglu_span_of(const T* g, const T* u, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gf = widen(g[i]);
    y[i] = narrow_to<T>(gf * sigmoid_of(gf) * widen(u[i]));
  }
}
template <typename T>
__attribute__((always_inline)) inline void swiglu_backward_span_of(const T* g, const T* u, const T* dy, T* dg, T* du,
                                                                   int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gf = widen(g[i]), uf = widen(u[i]), d = widen(dy[i]);
    const float s = sigmoid_of(gf);
    dg[i] = narrow_to<T>(d * uf * s * (1.0f + gf * (1.0f - s)));
    du[i] = narrow_to<T>(d * gf * s);
  }
}
// One clone set per storage type (target_clones does not take templates).
SPMD_VECTOR_CLONES void swiglu_span(const float* g, const float* u, float* y, int64_t n) { swiglu_span_of(g, u, y, n); }
SPMD_VECTOR_CLONES void swiglu_span(const uint16_t* g, const uint16_t* u, uint16_t* y, int64_t n) {
  swiglu_span_of(g, u, y, n);
}
SPMD_VECTOR_CLONES void swiglu_backward_span(const float* g, const float* u, const float* dy, float* dg, float* du,
                                             int64_t n) {
  swiglu_backward_span_of(g, u, dy, dg, du, n);
}
SPMD_VECTOR_CLONES void swiglu_backward_span(const uint16_t* g, const uint16_t* u, const uint16_t* dy, uint16_t* dg,
                                             uint16_t* du, int64_t n) {
  swiglu_backward_span_of(g, u, dy, dg, du, n);
}

// Elements per task: about at::internal::GRAIN_SIZE.
constexpr int64_t kSwigluGrain = 32768;

template <typename T>
void forward_into(const at::Tensor& g, const at::Tensor& u, at::Tensor& y) {
  const T *g_p = elements_of<T>(g), *u_p = elements_of<T>(u);
  T* y_p = elements_of<T>(y);
  at::parallel_for(0, g.numel(), kSwigluGrain,
                   [&](int64_t b, int64_t e) { swiglu_span(g_p + b, u_p + b, y_p + b, e - b); });
}
template <typename T>
void backward_into(const at::Tensor& g, const at::Tensor& u, const at::Tensor& dy, at::Tensor& dg, at::Tensor& du) {
  const T *g_p = elements_of<T>(g), *u_p = elements_of<T>(u), *dy_p = elements_of<T>(dy);
  T *dg_p = elements_of<T>(dg), *du_p = elements_of<T>(du);
  at::parallel_for(0, g.numel(), kSwigluGrain, [&](int64_t b, int64_t e) {
    swiglu_backward_span(g_p + b, u_p + b, dy_p + b, dg_p + b, du_p + b, e - b);
  });
}

at::Tensor swiglu_values(const at::Tensor& g, const at::Tensor& u) {
  at::Tensor y = at::empty_like(g);
  if (g.scalar_type() == at::kBFloat16) forward_into<uint16_t>(g, u, y);
  else forward_into<float>(g, u, y);
  return y;
}

// gate_up's rows of 2 F, [gate | up], -> y's rows of F, and back into a gradient of gate_up's layout.
int64_t rows_per_task(int64_t F) { return std::max<int64_t>(1, kSwigluGrain / std::max<int64_t>(F, 1)); }
template <typename T>
void halves_forward_into(const at::Tensor& gu, at::Tensor& y, int64_t F) {
  const T* gu_p = elements_of<T>(gu);
  T* y_p = elements_of<T>(y);
  at::parallel_for(0, y.numel() / F, rows_per_task(F), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) swiglu_span(gu_p + 2 * r * F, gu_p + (2 * r + 1) * F, y_p + r * F, F);
  });
}
template <typename T>
void halves_backward_into(const at::Tensor& gu, const at::Tensor& dy, at::Tensor& dgu, int64_t F) {
  const T *gu_p = elements_of<T>(gu), *dy_p = elements_of<T>(dy);
  T* dgu_p = elements_of<T>(dgu);
  at::parallel_for(0, dy.numel() / F, rows_per_task(F), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      swiglu_backward_span(gu_p + 2 * r * F, gu_p + (2 * r + 1) * F, dy_p + r * F, dgu_p + 2 * r * F,
                           dgu_p + (2 * r + 1) * F, F);
  });
}

at::Tensor halves_values(const at::Tensor& gu) {
  std::vector<int64_t> shape = gu.sizes().vec();
  const int64_t F = shape.back() / 2;
  shape.back() = F;
  at::Tensor y = at::empty(shape, gu.options());
  if (gu.scalar_type() == at::kBFloat16) halves_forward_into<uint16_t>(gu, y, F);
  else halves_forward_into<float>(gu, y, F);
  return y;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedSwiGlu : torch::autograd::Function<FusedSwiGlu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    const at::Tensor g = gate.contiguous(), u = up.contiguous();
    ctx->save_for_backward({g, u});
    return swiglu_values(g, u);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &g = saved[0], &u = saved[1];
    const at::Tensor dy = grads[0].to(g.scalar_type()).contiguous();
    at::Tensor dg = at::empty_like(g), du = at::empty_like(u);
    if (g.scalar_type() == at::kBFloat16) backward_into<uint16_t>(g, u, dy, dg, du);
    else backward_into<float>(g, u, dy, dg, du);
    return {dg, du};
  }
};

struct FusedSwiGluHalves : torch::autograd::Function<FusedSwiGluHalves> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up) {
    const at::Tensor gu = gate_up.contiguous();
    ctx->save_for_backward({gu});
    return halves_values(gu);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor gu = ctx->get_saved_variables()[0];
    const at::Tensor dy = grads[0].to(gu.scalar_type()).contiguous();
    at::Tensor dgu = at::empty_like(gu);
    if (gu.scalar_type() == at::kBFloat16) halves_backward_into<uint16_t>(gu, dy, dgu, dy.size(-1));
    else halves_backward_into<float>(gu, dy, dgu, dy.size(-1));
    return {dgu};
  }
};

}  // namespace

bool fused_swiglu_supports(const at::Tensor& gate, const at::Tensor& up) {
  return gate.device().is_cpu() && up.device().is_cpu() && gate.scalar_type() == up.scalar_type() &&
         (gate.scalar_type() == at::kFloat || gate.scalar_type() == at::kBFloat16) && gate.sizes() == up.sizes();
}

at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up) {
  SPMD_ASSERT(fused_swiglu_supports(gate, up), "fused_swiglu: needs float32 or bf16 gate and up of one shape on CPU, got {} and {}",
              gate.sizes().vec(), up.sizes().vec());
  if (at::GradMode::is_enabled() && (gate.requires_grad() || up.requires_grad())) return FusedSwiGlu::apply(gate, up);
  return swiglu_values(gate.contiguous(), up.contiguous());  // inference: no node, nothing kept
}

bool fused_swiglu_halves_supports(const at::Tensor& gate_up) {
  return gate_up.device().is_cpu() && (gate_up.scalar_type() == at::kFloat || gate_up.scalar_type() == at::kBFloat16) &&
         gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0 && gate_up.size(-1) > 0;
}

at::Tensor fused_swiglu_halves(const at::Tensor& gate_up) {
  SPMD_ASSERT(fused_swiglu_halves_supports(gate_up),
              "fused_swiglu_halves: needs a float32 or bf16 [gate | up] of an even last dim on CPU, got {}",
              gate_up.sizes().vec());
  if (at::GradMode::is_enabled() && gate_up.requires_grad()) return FusedSwiGluHalves::apply(gate_up);
  return halves_values(gate_up.contiguous());
}

}  // namespace spmd::kernels::cpu
