// Fused causal attention: per (batch row, head) task, row-major matmuls on raw pointers into the
// qkv activation, a causal softmax in place, and the output written straight into (B, T, H, D).
//
// Forward, per head (Q, K, V: (T, D) with row stride 3*H*D inside qkv):
//   P = causal_softmax(Q K^T * scale)        saved, (T, T), zero above the diagonal
//   Pd = P * M (dropout, when a mask is given)
//   Y = Pd V
// Backward, from dY:
//   dPd = dY V^T;  dV = Pd^T dY;  dP = dPd * M
//   dS = P * (dP - rowsum(dP * P)) * scale
//   dQ = dS K;     dK = dS^T Q
// Rows are processed in blocks of kRowBlock; block [i0, i1) only needs keys [0, i1), so about half
// of the T x T products are never computed.
#include "model/fused_attention.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "util/error.h"

namespace spmd {

namespace {

constexpr int64_t kRowBlock = 32;

std::atomic<bool> g_force_aten_gemm{false};

// Fortran BLAS sgemm_, the one libtorch itself calls on this build (Debian links libblas.so.3 =
// OpenBLAS). Looked up at run time so that builds whose BLAS is private (MKL inside the 2.x
// wheels) still link; they take the at::addmm_out path. Called inside at::parallel_for, OpenBLAS
// (and MKL) run single-threaded, which is what one head's small matmul wants.
using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                         const int*, const float*, const int*, const float*, float*, const int*);

SgemmFn blas_sgemm() {
  static const SgemmFn fn = reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "sgemm_"));
  return g_force_aten_gemm.load(std::memory_order_relaxed) ? nullptr : fn;
}

// Row-major C (m x n, row stride ldc) = alpha * op(A) op(B) + beta * C, op(A): (m x k), op(B): (k x n).
// beta == 0 never reads C.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (SgemmFn sgemm = blas_sgemm()) {
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
    const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
    const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
    const int ldai = static_cast<int>(lda), ldbi = static_cast<int>(ldb), ldci = static_cast<int>(ldc);
    sgemm(&tb, &ta, &ni, &mi, &ki, &alpha, b, &ldbi, a, &ldai, &beta, c, &ldci);
    return;
  }
  auto view = [](const float* p, int64_t rows, int64_t cols, int64_t ld, bool trans) {
    at::Tensor t = at::from_blob(const_cast<float*>(p), {trans ? cols : rows, trans ? rows : cols}, {ld, 1},
                                 at::TensorOptions().dtype(at::kFloat));
    return trans ? t.t() : t;
  };
  at::Tensor out = at::from_blob(c, {m, n}, {ldc, 1}, at::TensorOptions().dtype(at::kFloat));
  at::addmm_out(out, out, view(a, m, k, lda, trans_a), view(b, k, n, ldb, trans_b), beta, alpha);
}

struct Shape {
  int64_t B, T, H, D;
  int64_t ld_qkv() const { return 3 * H * D; }  // row stride of Q, K, V inside qkv
  int64_t ld_y() const { return H * D; }        // row stride of one head's rows in (B, T, H, D)
};

// P (T x T) of one head from Q, K; rows above the diagonal zeroed.
void causal_softmax_probs(const Shape& s, const float* q, const float* k, float scale, float* p) {
  const int64_t T = s.T, ld = s.ld_qkv();
  for (int64_t i0 = 0; i0 < T; i0 += kRowBlock) {
    const int64_t i1 = std::min(T, i0 + kRowBlock);
    gemm(false, true, i1 - i0, i1, s.D, scale, q + i0 * ld, ld, k, ld, 0.f, p + i0 * T, T);
  }
  for (int64_t i = 0; i < T; ++i) {
    float* row = p + i * T;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j <= i; ++j) max = std::max(max, row[j]);
    float sum = 0;
    for (int64_t j = 0; j <= i; ++j) {
      row[j] = std::exp(row[j] - max);
      sum += row[j];
    }
    const float inv = 1.f / sum;
    for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
    std::fill(row + i + 1, row + T, 0.f);
  }
}

// dst = p * mask on and below the diagonal, zero above.
void apply_mask(int64_t T, const float* p, const float* mask, float* dst) {
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t j = 0; j <= i; ++j) dst[i * T + j] = p[i * T + j] * mask[i * T + j];
    std::fill(dst + i * T + i + 1, dst + (i + 1) * T, 0.f);
  }
}

// C (T x D, ldc) = L X for lower-triangular L (T x T): row block [i0, i1) needs X's rows [0, i1).
void lower_times(const Shape& s, const float* l, const float* x, int64_t ldx, float* c, int64_t ldc) {
  const int64_t T = s.T;
  for (int64_t i0 = 0; i0 < T; i0 += kRowBlock) {
    const int64_t i1 = std::min(T, i0 + kRowBlock);
    gemm(false, false, i1 - i0, s.D, i1, 1.f, l + i0 * T, T, x, ldx, 0.f, c + i0 * ldc, ldc);
  }
}

// C (T x D, ldc) = L^T X for lower-triangular L: rows [j0, j1) of C need L's rows [j0, T).
void lower_transposed_times(const Shape& s, const float* l, const float* x, int64_t ldx, float* c, int64_t ldc) {
  const int64_t T = s.T;
  for (int64_t j0 = 0; j0 < T; j0 += kRowBlock) {
    const int64_t j1 = std::min(T, j0 + kRowBlock);
    gemm(true, false, j1 - j0, s.D, T - j0, 1.f, l + j0 * T + j0, T, x + j0 * ldx, ldx, 0.f, c + j0 * ldc, ldc);
  }
}

Shape shape_of(const at::Tensor& qkv) {
  return {qkv.size(0), qkv.size(1), qkv.size(3), qkv.size(4)};
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedCausalAttention : torch::autograd::Function<FusedCausalAttention> {
  // The mask is passed by pointer: it needs no gradient, and an undefined tensor input trips 1.13's
  // autograd bookkeeping.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& qkv_in, const at::Tensor* mask_in) {
    const at::Tensor qkv = qkv_in.contiguous();
    const at::Tensor mask = mask_in->defined() ? mask_in->contiguous() : at::Tensor();
    const Shape s = shape_of(qkv);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.D)));
    at::Tensor probs = at::empty({s.B, s.H, s.T, s.T}, qkv.options());  // (B, H, T, T)
    at::Tensor y = at::empty({s.B, s.T, s.H, s.D}, qkv.options());      // (B, T, H, D)
    const float* qkv_p = qkv.data_ptr<float>();
    const float* mask_p = mask.defined() ? mask.data_ptr<float>() : nullptr;
    float* probs_p = probs.data_ptr<float>();
    float* y_p = y.data_ptr<float>();
    at::parallel_for(0, s.B * s.H, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> dropped(mask_p ? static_cast<size_t>(s.T * s.T) : 0);
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / s.H, h = bh % s.H;
        const float* q = qkv_p + b * s.T * s.ld_qkv() + h * s.D;
        const float* k = q + s.H * s.D;
        const float* v = q + 2 * s.H * s.D;
        float* p = probs_p + bh * s.T * s.T;
        causal_softmax_probs(s, q, k, scale, p);
        const float* pd = p;
        if (mask_p) {
          apply_mask(s.T, p, mask_p + bh * s.T * s.T, dropped.data());
          pd = dropped.data();
        }
        lower_times(s, pd, v, s.ld_qkv(), y_p + b * s.T * s.ld_y() + h * s.D, s.ld_y());
      }
    });
    ctx->save_for_backward({qkv, probs});
    ctx->saved_data["has_mask"] = mask.defined();
    if (mask.defined()) ctx->saved_data["mask"] = mask;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& qkv = saved[0];
    const at::Tensor& probs = saved[1];
    const bool has_mask = ctx->saved_data["has_mask"].toBool();
    const at::Tensor grad_y = grads[0].contiguous();  // (B, T, H, D)
    const Shape s = shape_of(qkv);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.D)));
    at::Tensor grad_qkv = at::empty_like(qkv);  // every element written below
    const float* qkv_p = qkv.data_ptr<float>();
    const float* probs_p = probs.data_ptr<float>();
    const at::Tensor mask = has_mask ? ctx->saved_data["mask"].toTensor() : at::Tensor();
    const float* mask_p = has_mask ? mask.data_ptr<float>() : nullptr;
    const float* gy_p = grad_y.data_ptr<float>();
    float* gqkv_p = grad_qkv.data_ptr<float>();
    const int64_t T = s.T, ld = s.ld_qkv(), HD = s.H * s.D;
    at::parallel_for(0, s.B * s.H, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> dp(static_cast<size_t>(T * T)), dropped(mask_p ? static_cast<size_t>(T * T) : 0);
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / s.H, h = bh % s.H;
        const int64_t offset = b * T * ld + h * s.D;
        const float *q = qkv_p + offset, *k = q + HD, *v = q + 2 * HD;
        float *dq = gqkv_p + offset, *dk = dq + HD, *dv = dq + 2 * HD;
        const float* gy = gy_p + b * T * s.ld_y() + h * s.D;
        const float* p = probs_p + bh * T * T;
        const float* m = mask_p ? mask_p + bh * T * T : nullptr;
        const float* pd = p;
        if (m) {
          apply_mask(T, p, m, dropped.data());
          pd = dropped.data();
        }
        // dPd = dY V^T, lower triangle only (row block [i0, i1) up to column i1).
        for (int64_t i0 = 0; i0 < T; i0 += kRowBlock) {
          const int64_t i1 = std::min(T, i0 + kRowBlock);
          gemm(false, true, i1 - i0, i1, s.D, 1.f, gy + i0 * s.ld_y(), s.ld_y(), v, ld, 0.f, dp.data() + i0 * T, T);
        }
        lower_transposed_times(s, pd, gy, s.ld_y(), dv, ld);  // dV = Pd^T dY
        // dS = P * (dP - rowsum(dP * P)) * scale, in place over dP; zero above the diagonal.
        for (int64_t i = 0; i < T; ++i) {
          float* row = dp.data() + i * T;
          const float* prow = p + i * T;
          if (m)
            for (int64_t j = 0; j <= i; ++j) row[j] *= m[i * T + j];
          float dot = 0;
          for (int64_t j = 0; j <= i; ++j) dot += row[j] * prow[j];
          for (int64_t j = 0; j <= i; ++j) row[j] = prow[j] * (row[j] - dot) * scale;
          std::fill(row + i + 1, row + T, 0.f);
        }
        lower_times(s, dp.data(), k, ld, dq, ld);             // dQ = dS K
        lower_transposed_times(s, dp.data(), q, ld, dk, ld);  // dK = dS^T Q
      }
    });
    return {grad_qkv, at::Tensor()};
  }
};

}  // namespace

bool fused_attention_supports(const at::Tensor& qkv) {
  return qkv.dim() == 5 && qkv.size(2) == 3 && qkv.device().is_cpu() && qkv.scalar_type() == at::kFloat;
}

at::Tensor fused_causal_attention(const at::Tensor& qkv, const at::Tensor& dropout_mask) {
  SPMD_ASSERT(fused_attention_supports(qkv), "fused_causal_attention: qkv must be float32 (B, T, 3, H, D) on CPU, got {}",
              qkv.sizes().vec());
  if (dropout_mask.defined())
    SPMD_ASSERT(dropout_mask.dim() == 4 && dropout_mask.size(0) == qkv.size(0) && dropout_mask.size(1) == qkv.size(3) &&
                    dropout_mask.size(2) == qkv.size(1) && dropout_mask.size(3) == qkv.size(1) &&
                    dropout_mask.scalar_type() == at::kFloat,
                "fused_causal_attention: dropout mask {} does not match qkv {}", dropout_mask.sizes().vec(), qkv.sizes().vec());
  return FusedCausalAttention::apply(qkv, &dropout_mask);
}

namespace detail {
void fused_attention_force_aten_gemm(bool force) { g_force_aten_gemm = force; }
}  // namespace detail

}  // namespace spmd
