// Residual add + RMSNorm, forward and backward, row by row (see fused_rms_norm.h). Per row of C:
//   forward:  s = x + delta;  r = 1 / sqrt(sum(s^2) / C + eps);  y = w * (s * r)
//   backward: g = dy * w;  d_s = (g - (s r) sum(g s r) / C) r + d_sum;  d_w += dy * (s r)
// bf16 delta and y (bf16 products) are widened / rounded (to nearest even) in the row loop.
#include "kernels/cpu/fused_rms_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <ATen/Parallel.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/cpu/row_reductions.h"
#include "util/error.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include "kernels/cpu/vector_math.h"

namespace spmd::kernels::cpu {

namespace {

// Rows per weight-gradient partial: fixed, so the sum's order does not depend on the threads.
constexpr int64_t kNormRowChunk = 32;

// A row's element as float32: float32 data, or bf16 bits widened.
inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const uint16_t* p, int64_t i) { return vecmath::bf16_to_float(p[i]); }
inline void store(float* p, int64_t i, float v) { p[i] = v; }
inline void store(uint16_t* p, int64_t i, float v) { p[i] = vecmath::float_to_bf16(v); }

// Rows [r0, r1): sum (written unless delta is null: then s is x), 1/rms, normed.
template <typename Delta, typename Out>
__attribute__((always_inline)) inline void norm_rows_of(const float* x, const Delta* delta, const float* w, float* sum,
                                                        float* rstd, Out* y, int64_t C, float eps, int64_t r0,
                                                        int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * C;
    float* sr = delta ? sum + r * C : const_cast<float*>(xr);
    if (delta)
      for (int64_t c = 0; c < C; ++c) sr[c] = xr[c] + load(delta + r * C, c);
    const float inv = 1.0f / std::sqrt(row_dot(sr, sr, C) / static_cast<float>(C) + eps);
    rstd[r] = inv;
    for (int64_t c = 0; c < C; ++c) store(y + r * C, c, w[c] * (sr[c] * inv));
  }
}
template <typename Delta, typename Out>
SPMD_VECTOR_CLONES void norm_rows(const float* x, const Delta* delta, const float* w, float* sum, float* rstd, Out* y,
                                  int64_t C, float eps, int64_t r0, int64_t r1);
#define SPMD_NORM_ROWS(Delta, Out)                                                                              \
  template <>                                                                                                   \
  SPMD_VECTOR_CLONES void norm_rows(const float* x, const Delta* delta, const float* w, float* sum, float* rstd, \
                                    Out* y, int64_t C, float eps, int64_t r0, int64_t r1) {                      \
    norm_rows_of(x, delta, w, sum, rstd, y, C, eps, r0, r1);                                                    \
  }
SPMD_NORM_ROWS(float, float)
SPMD_NORM_ROWS(uint16_t, float)
SPMD_NORM_ROWS(float, uint16_t)
SPMD_NORM_ROWS(uint16_t, uint16_t)

// Rows [r0, r1) of the backward: d_sum (+= the stream's d_sum_in when given), this chunk's
// weight-gradient partial dw (C, zeroed here).
template <typename DOut>
__attribute__((always_inline)) inline void norm_backward_rows_of(const float* s, const float* rstd, const float* w,
                                                                 const DOut* dy, const float* d_in, float* d_s,
                                                                 float* dw, int64_t C, int64_t r0, int64_t r1) {
  std::vector<float> g(static_cast<size_t>(C));  // dy w
  for (int64_t c = 0; c < C; ++c) dw[c] = 0.f;
  for (int64_t r = r0; r < r1; ++r) {
    const float* sr = s + r * C;
    const float inv = rstd[r];
    for (int64_t c = 0; c < C; ++c) g[c] = load(dy + r * C, c) * w[c];
    const float k = row_dot(g.data(), sr, C) * inv * inv * inv / static_cast<float>(C);
    float* dr = d_s + r * C;
    for (int64_t c = 0; c < C; ++c) {
      dr[c] = g[c] * inv - sr[c] * k + (d_in ? d_in[r * C + c] : 0.f);
      dw[c] += load(dy + r * C, c) * (sr[c] * inv);
    }
  }
}
template <typename DOut>
SPMD_VECTOR_CLONES void norm_backward_rows(const float* s, const float* rstd, const float* w, const DOut* dy,
                                           const float* d_in, float* d_s, float* dw, int64_t C, int64_t r0, int64_t r1);
template <>
SPMD_VECTOR_CLONES void norm_backward_rows(const float* s, const float* rstd, const float* w, const float* dy,
                                           const float* d_in, float* d_s, float* dw, int64_t C, int64_t r0,
                                           int64_t r1) {
  norm_backward_rows_of(s, rstd, w, dy, d_in, d_s, dw, C, r0, r1);
}
template <>
SPMD_VECTOR_CLONES void norm_backward_rows(const float* s, const float* rstd, const float* w, const uint16_t* dy,
                                           const float* d_in, float* d_s, float* dw, int64_t C, int64_t r0,
                                           int64_t r1) {
  norm_backward_rows_of(s, rstd, w, dy, d_in, d_s, dw, C, r0, r1);
}

// float32 data, or bf16's bits.
template <typename T>
T* elements(const at::Tensor& t) {
  if constexpr (std::is_same_v<T, float>) return t.data_ptr<float>();
  else return reinterpret_cast<T*>(t.data_ptr<at::BFloat16>());
}

template <typename Delta, typename Out>
void forward_of(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& w, at::Tensor& sum, at::Tensor& rstd,
                at::Tensor& y, float eps) {
  const int64_t C = x.size(1), rows = x.size(0);
  const float* x_p = x.data_ptr<float>();
  const Delta* d_p = delta.defined() ? elements<Delta>(delta) : nullptr;
  float* s_p = sum.data_ptr<float>();
  float* r_p = rstd.data_ptr<float>();
  Out* y_p = elements<Out>(y);
  at::parallel_for(0, rows, kNormRowChunk, [&](int64_t r0, int64_t r1) {
    norm_rows(x_p, d_p, w.data_ptr<float>(), s_p, r_p, y_p, C, eps, r0, r1);
  });
}

// Which storage types a call takes: float32 and bf16 (raw bits).
template <typename F>
void with_types(at::ScalarType a, at::ScalarType b, F&& f) {
  const bool a16 = a == at::kBFloat16, b16 = b == at::kBFloat16;
  if (a16 && b16) f(uint16_t{}, uint16_t{});
  else if (a16) f(uint16_t{}, float{});
  else if (b16) f(float{}, uint16_t{});
  else f(float{}, float{});
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedResidualRmsNorm : torch::autograd::Function<FusedResidualRmsNorm> {
  // x, delta: (rows, C) contiguous; delta empty: none (the sum is x). {sum, normed}.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& delta_in,
                               const at::Tensor& weight, double eps, at::ScalarType out_dtype) {
    const at::Tensor delta = delta_in.numel() > 0 ? delta_in : at::Tensor();
    at::Tensor sum = delta.defined() ? at::empty_like(x) : x;
    at::Tensor rstd = at::empty({x.size(0)}, x.options());
    at::Tensor y = at::empty(x.sizes(), x.options().dtype(out_dtype));
    const at::Tensor w = weight.contiguous();
    with_types(delta.defined() ? delta.scalar_type() : at::kFloat, out_dtype, [&](auto d, auto o) {
      forward_of<decltype(d), decltype(o)>(x, delta, w, sum, rstd, y, static_cast<float>(eps));
    });
    ctx->save_for_backward({sum, w, rstd});
    ctx->saved_data["delta_dtype"] =
        static_cast<int64_t>(delta.defined() ? delta.scalar_type() : at::ScalarType::Undefined);
    return {sum, y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &s = saved[0], &w = saved[1], &rstd = saved[2];
    const int64_t rows = s.size(0), C = s.size(1);
    const at::Tensor d_in = grads[0].defined() ? grads[0].to(at::kFloat).contiguous() : at::Tensor();
    const at::Tensor dy = grads[1].defined() ? grads[1].contiguous() : at::zeros({rows, C}, s.options());
    at::Tensor d_s = at::empty_like(s);
    const int64_t chunks = (rows + kNormRowChunk - 1) / kNormRowChunk;
    at::Tensor partials = at::empty({chunks, C}, s.options());
    const float* din_p = d_in.defined() ? d_in.data_ptr<float>() : nullptr;
    auto run = [&](auto tag) {
      using DOut = decltype(tag);
      const DOut* dy_p = elements<DOut>(dy);
      at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c)
          norm_backward_rows(s.data_ptr<float>(), rstd.data_ptr<float>(), w.data_ptr<float>(), dy_p, din_p,
                             d_s.data_ptr<float>(), partials.data_ptr<float>() + c * C, C, c * kNormRowChunk,
                             std::min(rows, (c + 1) * kNormRowChunk));
      });
    };
    if (dy.scalar_type() == at::kBFloat16) run(uint16_t{});
    else run(float{});
    const auto delta_dtype = static_cast<at::ScalarType>(ctx->saved_data["delta_dtype"].toInt());
    const at::Tensor d_delta = delta_dtype == at::ScalarType::Undefined ? at::Tensor() : d_s.to(delta_dtype);
    return {d_s, d_delta, partials.sum(0), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_rms_norm_supports(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                             at::ScalarType out_dtype) {
  const auto cpu_float = [](const at::Tensor& t, bool bf16_too) {
    return t.device().is_cpu() && (t.scalar_type() == at::kFloat || (bf16_too && t.scalar_type() == at::kBFloat16));
  };
  return x.dim() >= 1 && cpu_float(x, false) && (!delta.defined() || (cpu_float(delta, true) && delta.sizes() == x.sizes())) &&
         weight.dim() == 1 && weight.size(0) == x.size(-1) && cpu_float(weight, false) &&
         (out_dtype == at::kFloat || out_dtype == at::kBFloat16);
}

SumAndNormed fused_residual_rms_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight, double eps,
                                     at::ScalarType out_dtype) {
  SPMD_ASSERT(fused_rms_norm_supports(x, delta, weight, out_dtype),
              "fused_residual_rms_norm: needs float32 x {} on CPU, delta of its shape (float32 or bf16, or none) and a "
              "float32 weight of its width, got weight {}",
              x.sizes().vec(), weight.sizes().vec());
  const int64_t C = x.size(-1);
  const at::Tensor none = at::empty({0}, x.options());
  const auto out = FusedResidualRmsNorm::apply(x.reshape({-1, C}).contiguous(),
                                               delta.defined() ? delta.reshape({-1, C}).contiguous() : none, weight,
                                               eps, out_dtype);
  return {out[0].view(x.sizes()), out[1].view(x.sizes())};
}

}  // namespace spmd::kernels::cpu
