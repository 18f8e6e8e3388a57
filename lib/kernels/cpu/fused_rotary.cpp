// Rotary pack (fused_rotary.h), per (b, t) row of heads, with half = D / 2:
//   forward   y[j] = x[j] c[j] - x[j + half] s[j]          (j < half)
//             y[j] = x[j] c[j] + x[j - half] s[j]          (j >= half)
//   backward  dx[j] = dy[j] c[j] + dy[j + half] s[j + half]  (j < half)
//             dx[j] = dy[j] c[j] - dy[j - half] s[j - half]  (j >= half)
// Products and sums are not contracted into FMAs: apply_rope's ops round each product, and so do
// these (bit-exact with it).
#include "kernels/cpu/fused_rotary.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <ATen/Parallel.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "util/error.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#endif
#include "kernels/cpu/vector_math.h"

namespace spmd::kernels::cpu {

namespace {

inline float rope_load(float v) { return v; }
inline float rope_load(uint16_t v) { return vecmath::bf16_to_float(v); }
template <typename T>
inline T rope_store(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return vecmath::float_to_bf16(v);
}

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
        const float a = rope_load(xh[j]) * c[j], b = -rope_load(xh[j + half]) * s[j];
        yh[j] = rope_store<T>(a + b);
      }
      for (int64_t j = half; j < D; ++j) {
        const float a = rope_load(xh[j]) * c[j], b = rope_load(xh[j - half]) * s[j];
        yh[j] = rope_store<T>(a + b);
      }
    } else {
      for (int64_t j = 0; j < half; ++j) {
        const float a = rope_load(xh[j]) * c[j], b = rope_load(xh[j + half]) * s[j + half];
        yh[j] = rope_store<T>(a + b);
      }
      for (int64_t j = half; j < D; ++j) {
        const float a = rope_load(xh[j]) * c[j], b = rope_load(xh[j - half]) * s[j - half];
        yh[j] = rope_store<T>(a - b);
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

template <typename T>
T* rope_elements(const at::Tensor& t) {
  if constexpr (std::is_same_v<T, float>) return t.data_ptr<float>();
  else return reinterpret_cast<T*>(t.data_ptr<at::BFloat16>());
}

// The rows of one direction: packed (B, T, H + 2 Hkv, D) <-> q (.., H, D), k and v (.., Hkv, D).
struct RopeRows {
  int64_t B, T, H, Hkv, D;
  bool per_row_angles;  // cos, sin (B, T, 1, D), else (1, T, 1, D)
  int64_t packed_ld() const { return (H + 2 * Hkv) * D; }
  const float* angles(const at::Tensor& a, int64_t row) const {
    return a.data_ptr<float>() + (per_row_angles ? row : row % T) * D;
  }
};

// Forward (back false): q, k, v -> packed. Backward: packed's gradient -> dq, dk, dv.
template <typename T>
void rope_pass(const RopeRows& r, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& packed,
               const at::Tensor& cos, const at::Tensor& sin, bool back) {
  T *q_p = rope_elements<T>(q), *k_p = rope_elements<T>(k), *v_p = rope_elements<T>(v),
    *pk = rope_elements<T>(packed);
  const int64_t ld = r.packed_ld(), HD = r.H * r.D, KD = r.Hkv * r.D;
  at::parallel_for(0, r.B * r.T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float *c = r.angles(cos, row), *s = r.angles(sin, row);
      T* p = pk + row * ld;
      if (!back) {
        rotate_heads(q_p + row * HD, p, c, s, r.H, r.D, false);
        rotate_heads(k_p + row * KD, p + HD, c, s, r.Hkv, r.D, false);
        std::copy(v_p + row * KD, v_p + (row + 1) * KD, p + HD + KD);
      } else {
        rotate_heads(p, q_p + row * HD, c, s, r.H, r.D, true);
        rotate_heads(p + HD, k_p + row * KD, c, s, r.Hkv, r.D, true);
        std::copy(p + HD + KD, p + HD + 2 * KD, v_p + row * KD);
      }
    }
  });
}
void rope_pass_any(const RopeRows& r, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& packed, const at::Tensor& cos, const at::Tensor& sin, bool back) {
  if (q.scalar_type() == at::kBFloat16) rope_pass<uint16_t>(r, q, k, v, packed, cos, sin, back);
  else rope_pass<float>(r, q, k, v, packed, cos, sin, back);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedRotaryPack : torch::autograd::Function<FusedRotaryPack> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in, const at::Tensor& cos_in, const at::Tensor& sin_in) {
    const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
    const at::Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
    const RopeRows r{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), cos.size(0) > 1};
    at::Tensor packed = at::empty({r.B, r.T, r.H + 2 * r.Hkv, r.D}, q.options());
    rope_pass_any(r, q, k, v, packed, cos, sin, false);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["shape"] = std::vector<int64_t>{r.B, r.T, r.H, r.Hkv, r.D};
    return packed;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto sh = ctx->saved_data["shape"].toIntVector();
    const RopeRows r{sh[0], sh[1], sh[2], sh[3], sh[4], saved[0].size(0) > 1};
    const at::Tensor dp = grads[0].contiguous();
    at::Tensor dq = at::empty({r.B, r.T, r.H, r.D}, dp.options()), dk = at::empty({r.B, r.T, r.Hkv, r.D}, dp.options()),
               dv = at::empty({r.B, r.T, r.Hkv, r.D}, dp.options());
    rope_pass_any(r, dq, dk, dv, dp, saved[0], saved[1], true);
    return {dq, dk, dv, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_rotary_supports(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                           const at::Tensor& sin) {
  const bool qkv_ok = q.dim() == 4 && k.dim() == 4 && q.device().is_cpu() && k.device().is_cpu() &&
                      v.device().is_cpu() && (q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16) &&
                      k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type() &&
                      k.sizes() == v.sizes() && q.size(0) == k.size(0) && q.size(1) == k.size(1) &&
                      q.size(3) == k.size(3) && q.size(3) % 2 == 0;
  if (!qkv_ok) return false;
  const auto angles_ok = [&](const at::Tensor& a) {
    return a.device().is_cpu() && a.scalar_type() == at::kFloat && a.dim() == 4 &&
           (a.size(0) == 1 || a.size(0) == q.size(0)) && a.size(1) == q.size(1) && a.size(2) == 1 &&
           a.size(3) == q.size(3);
  };
  return angles_ok(cos) && angles_ok(sin) && cos.sizes() == sin.sizes();
}

at::Tensor fused_rotary_pack(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                             const at::Tensor& sin) {
  SPMD_ASSERT(fused_rotary_supports(q, k, v, cos, sin),
              "fused_rotary_pack: needs q (B, T, H, D), k and v (B, T, Hkv, D) of one dtype (float32 or bf16) and "
              "float32 angles (1 or B, T, 1, D) on CPU, got q {} k {} v {} cos {}",
              q.sizes().vec(), k.sizes().vec(), v.sizes().vec(), cos.sizes().vec());
  return FusedRotaryPack::apply(q, k, v, cos, sin);
}

}  // namespace spmd::kernels::cpu
