// The one-pass AdamW update. Built with -fno-math-errno (lib/CMakeLists.txt): sqrt without errno,
// so the loop vectorizes.
#include "kernels/cpu/fused_adamw.h"

#include <cmath>

#include <ATen/Parallel.h>

#include "kernels/cpu/vector_math.h"
#include "util/error.h"

namespace spmd::kernels::cpu {

namespace {

// The step's numbers in float32, as the loop uses them.
struct UpdateScalars {
  float grad_scale, decay_factor, beta1, one_minus_beta1, beta2, one_minus_beta2, bias2, eps, step_size;
};

UpdateScalars float_scalars(const AdamWScalars& s) {
  const bool decay = s.weight_decay != 0;
  return {static_cast<float>(s.grad_scale),
          decay ? static_cast<float>(1.0 - s.lr * s.weight_decay) : 1.0f,
          static_cast<float>(s.beta1),
          static_cast<float>(1.0 - s.beta1),
          static_cast<float>(s.beta2),
          static_cast<float>(1.0 - s.beta2),
          static_cast<float>(s.bias2),
          static_cast<float>(s.eps),
          static_cast<float>(-s.lr / s.bias1)};
}

SPMD_VECTOR_CLONES
void update_range(float* p, const float* g, float* m, float* v, int64_t begin, int64_t end, const UpdateScalars& s) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i] * s.grad_scale;
    const float mi = m[i] * s.beta1 + gi * s.one_minus_beta1;
    const float vi = v[i] * s.beta2 + gi * gi * s.one_minus_beta2;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * s.decay_factor + s.step_size * (mi / (std::sqrt(vi / s.bias2) + s.eps));
  }
}

bool fusable(const at::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous(); }

}  // namespace

bool fused_adamw_supports(const at::Tensor& p, const at::Tensor& g, const at::Tensor& m, const at::Tensor& v) {
  return fusable(p) && fusable(g) && fusable(m) && fusable(v) && g.numel() == p.numel() && m.numel() == p.numel() &&
         v.numel() == p.numel();
}

void fused_adamw_update(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, const AdamWScalars& s) {
  SPMD_ASSERT(fused_adamw_supports(p, g, m, v), "fused_adamw_update: needs float32 contiguous CPU tensors");
  const UpdateScalars f = float_scalars(s);
  float* p_p = p.data_ptr<float>();
  const float* g_p = g.data_ptr<float>();
  float* m_p = m.data_ptr<float>();
  float* v_p = v.data_ptr<float>();
  at::parallel_for(0, p.numel(), 16384, [&](int64_t begin, int64_t end) { update_range(p_p, g_p, m_p, v_p, begin, end, f); });
}

}  // namespace spmd::kernels::cpu
