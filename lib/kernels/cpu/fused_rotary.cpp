// Rotary pack (fused_rotary.h), per (b, t) row of query and key heads, with half = D / 2:
//   forward   y[j] = x[j] c[j] - x[j + half] s[j]          (j < half)
//             y[j] = x[j] c[j] + x[j - half] s[j]          (j >= half)
//   backward  dx[j] = dy[j] c[j] + dy[j + half] s[j + half]  (j < half)
//             dx[j] = dy[j] c[j] - dy[j - half] s[j - half]  (j >= half)
// Products and sums are not contracted into FMAs: apply_rope's ops round each product, and so do
// these (bit-exact with it).
#include "kernels/cpu/fused_rotary.h"

#include <algorithm>
#include <cstdint>

#include <ATen/Parallel.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "util/error.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#endif
#include "kernels/cpu/storage_types.h"

namespace spmd::kernels::cpu {

namespace {

// `heads` heads of D at x (stride D) rotated into y; sign -1 rotates back (the backward).
template <typename T>
__attribute__((always_inline)) inline void rotate_heads_of(const T* x, T* y, const float* c, const float* s,
                                                           int64_t heads, int64_t D, bool back) {
  const int64_t half = D / 2;
  for (int64_t h = 0; h < heads; ++h) {
    const T* xh = x + h * D;
    T* yh = y + h * D;
    if (!back) {
      for (int64_t j = 0; j < half; ++j) {
        const float a = widen(xh[j]) * c[j], b = -widen(xh[j + half]) * s[j];
        yh[j] = narrow_to<T>(a + b);
      }
      for (int64_t j = half; j < D; ++j) {
        const float a = widen(xh[j]) * c[j], b = widen(xh[j - half]) * s[j];
        yh[j] = narrow_to<T>(a + b);
      }
    } else {
      for (int64_t j = 0; j < half; ++j) {
        const float a = widen(xh[j]) * c[j], b = widen(xh[j + half]) * s[j + half];
        yh[j] = narrow_to<T>(a + b);
      }
      for (int64_t j = half; j < D; ++j) {
        const float a = widen(xh[j]) * c[j], b = widen(xh[j - half]) * s[j - half];
        yh[j] = narrow_to<T>(a - b);
      }
    }
  }
}
SPMD_VECTOR_CLONES void rotate_heads(const float* x, float* y, const float* c, const float* s, int64_t heads,
                                     int64_t D, bool back) {
  rotate_heads_of(x, y, c, s, heads, D, back);
}
SPMD_VECTOR_CLONES void rotate_heads(const uint16_t* x, uint16_t* y, const float* c, const float* s, int64_t heads,
                                     int64_t D, bool back) {
  rotate_heads_of(x, y, c, s, heads, D, back);
}

// The rows of a packed (B, T, H + 2 Hkv, D) tensor: query heads, key heads, value heads.
struct RopeRows {
  int64_t B, T, H, Hkv, D;
  bool per_row_angles;  // cos, sin (B, T, 1, D), else (1, T, 1, D)
  int64_t ld() const { return (H + 2 * Hkv) * D; }
  const float* angles(const at::Tensor& a, int64_t row) const {
    return a.data_ptr<float>() + (per_row_angles ? row : row % T) * D;
  }
};

// Forward (back false): the query and key heads of `from` rotated into `to`, the value heads
// copied. Backward (back true): the same with the rotation reversed, on the gradient.
template <typename T>
void rope_pass(const RopeRows& r, const at::Tensor& from, const at::Tensor& to, const at::Tensor& cos,
               const at::Tensor& sin, bool back) {
  const T* in = elements_of<T>(from);
  T* out = elements_of<T>(to);
  const int64_t ld = r.ld(), rotated = (r.H + r.Hkv) * r.D;
  at::parallel_for(0, r.B * r.T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float *c = r.angles(cos, row), *s = r.angles(sin, row);
      const T* x = in + row * ld;
      T* y = out + row * ld;
      rotate_heads(x, y, c, s, r.H + r.Hkv, r.D, back);  // query and key heads share the angles
      std::copy(x + rotated, x + ld, y + rotated);
    }
  });
}
at::Tensor rope_pass_any(const RopeRows& r, const at::Tensor& from, const at::Tensor& cos, const at::Tensor& sin,
                         bool back) {
  at::Tensor to = at::empty_like(from);
  if (from.scalar_type() == at::kBFloat16) rope_pass<uint16_t>(r, from, to, cos, sin, back);
  else rope_pass<float>(r, from, to, cos, sin, back);
  return to;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedRotaryPack : torch::autograd::Function<FusedRotaryPack> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& qkv_in, int64_t kv_heads, const at::Tensor& cos_in,
                            const at::Tensor& sin_in) {
    const at::Tensor qkv = qkv_in.contiguous(), cos = cos_in.contiguous(), sin = sin_in.contiguous();
    const RopeRows r{qkv.size(0), qkv.size(1), qkv.size(2) - 2 * kv_heads, kv_heads, qkv.size(3), cos.size(0) > 1};
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["shape"] = std::vector<int64_t>{r.B, r.T, r.H, r.Hkv, r.D};
    return rope_pass_any(r, qkv, cos, sin, false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto sh = ctx->saved_data["shape"].toIntVector();
    const RopeRows r{sh[0], sh[1], sh[2], sh[3], sh[4], saved[0].size(0) > 1};
    return {rope_pass_any(r, grads[0].contiguous(), saved[0], saved[1], true), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

bool fused_rotary_supports(const at::Tensor& qkv, int64_t kv_heads, const at::Tensor& cos, const at::Tensor& sin) {
  const bool qkv_ok = qkv.dim() == 4 && qkv.device().is_cpu() &&
                      (qkv.scalar_type() == at::kFloat || qkv.scalar_type() == at::kBFloat16) && kv_heads > 0 &&
                      qkv.size(2) > 2 * kv_heads && qkv.size(3) % 2 == 0;
  if (!qkv_ok) return false;
  const auto angles_ok = [&](const at::Tensor& a) {
    return a.device().is_cpu() && a.scalar_type() == at::kFloat && a.dim() == 4 &&
           (a.size(0) == 1 || a.size(0) == qkv.size(0)) && a.size(1) == qkv.size(1) && a.size(2) == 1 &&
           a.size(3) == qkv.size(3);
  };
  return angles_ok(cos) && angles_ok(sin) && cos.sizes() == sin.sizes();
}

at::Tensor fused_rotary_pack(const at::Tensor& qkv, int64_t kv_heads, const at::Tensor& cos, const at::Tensor& sin) {
  SPMD_ASSERT(fused_rotary_supports(qkv, kv_heads, cos, sin),
              "fused_rotary_pack: needs a packed qkv (B, T, H + 2 Hkv, D) of float32 or bf16 with Hkv = {} and "
              "float32 angles (1 or B, T, 1, D) on CPU, got qkv {} cos {}",
              kv_heads, qkv.sizes().vec(), cos.sizes().vec());
  return FusedRotaryPack::apply(qkv, kv_heads, cos, sin);
}

}  // namespace spmd::kernels::cpu
