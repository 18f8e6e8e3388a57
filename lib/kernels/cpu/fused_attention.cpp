// Fused causal attention: per (batch row, head) task, row-major matmuls on raw pointers into the
// qkv activation, a causal softmax in place, and the output written straight into (B, T, H, D).
// bf16 qkv (bf16 matmuls): each task widens its head's Q, K, V (and dY) into float32 rows of its
// own, computes as for float32, and rounds Y (dQ, dK, dV) into bf16: the float32 kernel's results
// on the bf16 values, rounded once, with no qkv-sized float32 copy.
//
// Forward, per head (Q, K, V: (T, D) with row stride 3*H*D inside qkv):
//   P = causal_softmax(Q K^T * scale)        saved, (T, T), zero above the diagonal
//   Pd = P * M (dropout, when a mask or its draws are given)
//   Y = Pd V
// Backward, from dY:
//   dPd = dY V^T;  dV = Pd^T dY;  dP = dPd * M
//   dS = P * (dP - rowsum(dP * P)) * scale
//   dQ = dS K;     dK = dS^T Q
// Dropout given as draws (kernels/dropout_draws.h): each task draws its head's M, the visible keys
// only, in forward and again in backward, so nothing (B, H, T, T) but P outlives the forward.
// Rows are processed in blocks of kRowBlock; block [i0, i1) only needs keys [0, i1), so about half
// of the T x T products are never computed. Packed documents (document starts given): row i sees
// keys [start_i, i] only; starts never decrease along a row, so block [i0, i1) needs keys
// [start_i0, i1), and column block [j0, j1) of P^T X only the rows whose document starts before j1.
#include "kernels/cpu/fused_attention.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <ATen/Parallel.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/cpu/cpu_gemm.h"
#include "kernels/cpu/row_reductions.h"
#include "kernels/dropout_draws.h"
#include "util/error.h"

// Lets GCC if-convert, so the row loops vectorize (see vector_math.h). Reductions need looser
// float rules, which would also break exp_approx's rounding: they live in row_reductions.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include "kernels/cpu/vector_math.h"

namespace spmd::kernels::cpu {

namespace {

// qkv's heads along a row: H query heads, then Hkv key heads, then Hkv value heads ((B, T, 3, H, D)
// is Hkv = H); query head h reads key/value head h / group.
struct Shape {
  int64_t B, T, H, D, Hkv;
  int64_t group() const { return H / Hkv; }
  int64_t ld_qkv() const { return (H + 2 * Hkv) * D; }  // row stride of Q, K, V inside qkv
  int64_t ld_y() const { return H * D; }                // row stride of one head's rows in (B, T, H, D)
  int64_t q_offset(int64_t h) const { return h * D; }
  int64_t k_offset(int64_t h) const { return (H + h / group()) * D; }
  int64_t v_offset(int64_t h) const { return (H + Hkv + h / group()) * D; }
};

// One batch row's document starts (T entries), or none: every row then starts at key 0.
struct RowStarts {
  const int64_t* starts = nullptr;
  int64_t of(int64_t i) const { return starts ? starts[i] : 0; }
  // The rows of column block [.., j1) that can see a key before j1: [0, end).
  int64_t rows_seeing_before(int64_t j1, int64_t T) const {
    if (!starts) return T;
    return std::lower_bound(starts + j1, starts + T, j1) - starts;
  }
};

// Rows [i0, i1) of the (T x T) scores in place -> causal softmax: row i over columns
// start_i..i, zero elsewhere.
SPMD_VECTOR_CLONES
void causal_softmax_rows(float* p, int64_t T, int64_t i0, int64_t i1, RowStarts st) {
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t first = st.of(i), n = i + 1 - first;
    float* row = p + i * T + first;
    const float m = row_max(row, n);
    for (int64_t j = 0; j < n; ++j) row[j] = vecmath::exp_approx(row[j] - m);
    const float inv = 1.f / row_dot(row, nullptr, n);
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;
    for (int64_t j = 0; j < first; ++j) p[i * T + j] = 0.f;
    for (int64_t j = i + 1; j < T; ++j) p[i * T + j] = 0.f;
  }
}

// dP -> dS in place: dS = P * (dP * M - rowsum(dP * M * P)) * scale over row i's keys
// start_i..i, zero elsewhere (M: the dropout multipliers, or null).
SPMD_VECTOR_CLONES
void softmax_backward_rows(float* dp, const float* p, const float* m, int64_t T, float scale, RowStarts st) {
  for (int64_t i = 0; i < T; ++i) {
    const int64_t first = st.of(i), n = i + 1 - first;
    float* row = dp + i * T + first;
    const float* prow = p + i * T + first;
    if (m)
      for (int64_t j = 0; j < n; ++j) row[j] *= m[i * T + first + j];
    const float dot = row_dot(row, prow, n);
    for (int64_t j = 0; j < n; ++j) row[j] = prow[j] * (row[j] - dot) * scale;
    for (int64_t j = 0; j < first; ++j) dp[i * T + j] = 0.f;
    for (int64_t j = i + 1; j < T; ++j) dp[i * T + j] = 0.f;
  }
}

// A (T x T) float32 buffer for one task, 64-byte aligned like every libtorch tensor. Not a
// std::vector: its address, and so where the vectorized row sums start their lanes, would depend
// on what the heap held before (selective recomputation replays this kernel after other
// allocations, and its gradients must keep the bits of the first pass).
at::Tensor scratch(int64_t T) { return at::empty({T, T}, at::TensorOptions().dtype(at::kFloat)); }

// dst = p * mask on and below the diagonal, zero above.
SPMD_VECTOR_CLONES
void apply_mask(int64_t T, const float* p, const float* mask, float* dst) {
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t j = 0; j <= i; ++j) dst[i * T + j] = p[i * T + j] * mask[i * T + j];
    for (int64_t j = i + 1; j < T; ++j) dst[i * T + j] = 0.f;
  }
}

// A head's (T x T) dropout multipliers: a slice of the given mask, drawn into the task's buffer,
// or none. Drawn: row i's visible keys start_i..i, zero before (read only as multipliers of P's
// zeros); nothing above the diagonal is read.
struct HeadMask {
  const float* mask = nullptr;          // (B * H, T, T), given
  const DropoutDraws* draws = nullptr;  // or drawn
  bool any() const { return mask || draws; }
  const float* of(int64_t bh, int64_t T, RowStarts st, float* buffer) const {
    if (mask) return mask + bh * T * T;
    if (!draws) return nullptr;
    for (int64_t i = 0; i < T; ++i) {
      const int64_t first = st.of(i);
      std::fill(buffer + i * T, buffer + i * T + first, 0.f);
      draws->fill_row(buffer + i * T + first, (bh * T + i) * T + first, i + 1 - first);
    }
    return buffer;
  }
};

// P (T x T) of one head from Q, K (row stride ld); zero outside each row's keys start_i..i.
void causal_softmax_probs(const Shape& s, const float* q, const float* k, int64_t ld, float scale, float* p,
                          RowStarts st) {
  const int64_t T = s.T;
  for (int64_t i0 = 0; i0 < T; i0 += kRowBlock) {
    const int64_t i1 = std::min(T, i0 + kRowBlock), c0 = st.of(i0);
    gemm(false, true, i1 - i0, i1 - c0, s.D, scale, q + i0 * ld, ld, k + c0 * ld, ld, 0.f, p + i0 * T + c0, T);
    causal_softmax_rows(p, T, i0, i1, st);  // while the block is in cache
  }
}

// C (T x D, ldc) = L X for L zero outside each row's keys start_i..i: row block [i0, i1) needs
// X's rows [start_i0, i1).
void lower_times(const Shape& s, const float* l, const float* x, int64_t ldx, float* c, int64_t ldc, RowStarts st) {
  const int64_t T = s.T;
  for (int64_t i0 = 0; i0 < T; i0 += kRowBlock) {
    const int64_t i1 = std::min(T, i0 + kRowBlock), c0 = st.of(i0);
    gemm(false, false, i1 - i0, s.D, i1 - c0, 1.f, l + i0 * T + c0, T, x + c0 * ldx, ldx, 0.f, c + i0 * ldc, ldc);
  }
}

// C (T x D, ldc) = L^T X + beta C for the same L: rows [j0, j1) of C need L's rows from j0 up to
// the last whose document starts before j1. beta 1 sums the query heads of one key/value head.
void lower_transposed_times(const Shape& s, const float* l, const float* x, int64_t ldx, float* c, int64_t ldc,
                            RowStarts st, float beta = 0.f) {
  const int64_t T = s.T;
  for (int64_t j0 = 0; j0 < T; j0 += kRowBlock) {
    const int64_t j1 = std::min(T, j0 + kRowBlock), end = st.rows_seeing_before(j1, T);
    gemm(true, false, j1 - j0, s.D, end - j0, 1.f, l + j0 * T + j0, T, x + j0 * ldx, ldx, beta, c + j0 * ldc, ldc);
  }
}

// (B, T, 3, H, D), or packed (B, T, H + 2 Hkv, D) with kv_heads = Hkv.
Shape shape_of(const at::Tensor& qkv, int64_t kv_heads) {
  if (qkv.dim() == 5) return {qkv.size(0), qkv.size(1), qkv.size(3), qkv.size(4), qkv.size(3)};
  return {qkv.size(0), qkv.size(1), qkv.size(2) - 2 * kv_heads, qkv.size(3), kv_heads};
}

// rows x D bf16 values (raw bits, row stride ld_src) widened into dst (row stride D), and back,
// rounded to nearest even as ATen's casts.
SPMD_VECTOR_CLONES
void widen_rows(const uint16_t* src, int64_t ld_src, float* dst, int64_t rows, int64_t D) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < D; ++j) dst[i * D + j] = vecmath::bf16_to_float(src[i * ld_src + j]);
}
SPMD_VECTOR_CLONES
void narrow_rows(const float* src, uint16_t* dst, int64_t ld_dst, int64_t rows, int64_t D) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < D; ++j) dst[i * ld_dst + j] = vecmath::float_to_bf16(src[i * D + j]);
}

// One head's (T x D) rows in float32 for the products: a view into float32 data, or, for bf16 data,
// a float32 copy in the task's own buffer (its bf16 values widened: the float32 kernel's inputs).
struct HeadRows {
  const float* p;
  int64_t ld;
};
inline HeadRows head_rows(const float* src, int64_t ld_src, const Shape&, float*) { return {src, ld_src}; }
inline HeadRows head_rows(const c10::BFloat16* src, int64_t ld_src, const Shape& s, float* buffer) {
  widen_rows(reinterpret_cast<const uint16_t*>(src), ld_src, buffer, s.T, s.D);
  return {buffer, s.D};
}

// Whether a task stages its heads' rows in float32 buffers of its own (bf16 data).
template <typename scalar_t>
constexpr bool kStaged = !std::is_same_v<scalar_t, float>;

// Where a head's (T x D) float32 result is written: straight into float32 data, or into the task's
// buffer, rounded into the bf16 data by finish().
template <typename scalar_t>
struct HeadOut {
  scalar_t* dst;
  int64_t ld_dst;
  float* buffer;
  float* p() const {
    if constexpr (kStaged<scalar_t>)
      return buffer;
    else
      return dst;
  }
  int64_t ld(const Shape& s) const { return kStaged<scalar_t> ? s.D : ld_dst; }
  void finish(const Shape& s) const {
    if constexpr (kStaged<scalar_t>) narrow_rows(buffer, reinterpret_cast<uint16_t*>(dst), ld_dst, s.T, s.D);
  }
};

// A task's float32 buffers of (T x D) rows: empty for float32 data, `count` of them for bf16.
struct TaskRows {
  at::Tensor rows;
  int64_t TD;
  TaskRows(bool staged, int64_t count, const Shape& s)
      : rows(at::empty({staged ? count : 0, s.T, s.D}, at::TensorOptions().dtype(at::kFloat))), TD(s.T * s.D) {}
  float* slot(int64_t i) const { return rows.numel() ? rows.data_ptr<float>() + i * TD : nullptr; }
};

// Every (row, head): P saved into probs, Y = (P * M) V into y.
template <typename scalar_t>
void attention_forward(const Shape& s, const scalar_t* qkv_p, HeadMask mask, const int64_t* starts_p, float* probs_p,
                       scalar_t* y_p) {
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.D)));
  const int64_t T = s.T, ld = s.ld_qkv();
  at::parallel_for(0, s.B * s.H, 1, [&](int64_t begin, int64_t end) {
    const at::Tensor dropped = scratch(mask.any() ? T : 0), drawn = scratch(mask.draws ? T : 0);
    const TaskRows rows(kStaged<scalar_t>, 4, s);  // q, k, v, y
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / s.H, h = bh % s.H;
      const scalar_t* src = qkv_p + b * T * ld;
      const HeadRows q = head_rows(src + s.q_offset(h), ld, s, rows.slot(0)),
                     k = head_rows(src + s.k_offset(h), ld, s, rows.slot(1)),
                     v = head_rows(src + s.v_offset(h), ld, s, rows.slot(2));
      float* p = probs_p + bh * T * T;
      const RowStarts st{starts_p ? starts_p + b * T : nullptr};
      causal_softmax_probs(s, q.p, k.p, q.ld, scale, p, st);
      const float* pd = p;
      if (const float* m = mask.of(bh, T, st, drawn.data_ptr<float>())) {
        apply_mask(T, p, m, dropped.data_ptr<float>());
        pd = dropped.data_ptr<float>();
      }
      const HeadOut<scalar_t> y{y_p + b * T * s.ld_y() + h * s.D, s.ld_y(), rows.slot(3)};
      lower_times(s, pd, v.p, v.ld, y.p(), y.ld(s), st);
      y.finish(s);
    }
  });
}

// One query head's backward: dQ into dq; dK, dV into dk, dv plus beta times what they hold (the
// group's earlier query heads).
struct HeadGrads {
  HeadRows q, k, v, gy;
  float* dq;
  int64_t ld_dq;
  float *dk, *dv;
  int64_t ld_dkv;
};
void head_backward(const Shape& s, const float* p, const float* m, float* dp, float* dropped, RowStarts st,
                   const HeadGrads& g, float beta) {
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.D)));
  const int64_t T = s.T;
  const float* pd = p;
  if (m) {
    apply_mask(T, p, m, dropped);
    pd = dropped;
  }
  // dPd = dY V^T, the visible keys only (row block [i0, i1): columns [start_i0, i1)).
  for (int64_t i0 = 0; i0 < T; i0 += kRowBlock) {
    const int64_t i1 = std::min(T, i0 + kRowBlock), c0 = st.of(i0);
    gemm(false, true, i1 - i0, i1 - c0, s.D, 1.f, g.gy.p + i0 * g.gy.ld, g.gy.ld, g.v.p + c0 * g.v.ld, g.v.ld, 0.f,
         dp + i0 * T + c0, T);
  }
  lower_transposed_times(s, pd, g.gy.p, g.gy.ld, g.dv, g.ld_dkv, st, beta);  // dV (+)= Pd^T dY
  softmax_backward_rows(dp, p, m, T, scale, st);                            // dP -> dS
  lower_times(s, dp, g.k.p, g.k.ld, g.dq, g.ld_dq, st);                     // dQ = dS K
  lower_transposed_times(s, dp, g.q.p, g.q.ld, g.dk, g.ld_dkv, st, beta);   // dK (+)= dS^T Q
}

// Every (row, key/value head): its query heads' dQ, and dK, dV summed over them, into grad_qkv from
// dY and the saved P. One task per key/value head: no two tasks write one dK.
template <typename scalar_t>
void attention_backward(const Shape& s, const scalar_t* qkv_p, const float* probs_p, HeadMask mask,
                        const int64_t* starts_p, const scalar_t* gy_p, scalar_t* gqkv_p) {
  const int64_t T = s.T, ld = s.ld_qkv();
  at::parallel_for(0, s.B * s.Hkv, 1, [&](int64_t begin, int64_t end) {
    const at::Tensor dp_rows = scratch(T), dropped = scratch(mask.any() ? T : 0), drawn = scratch(mask.draws ? T : 0);
    const TaskRows rows(kStaged<scalar_t>, 7, s);  // q, k, v, dY in; dQ, dK, dV out
    for (int64_t bkv = begin; bkv < end; ++bkv) {
      const int64_t b = bkv / s.Hkv, h0 = bkv % s.Hkv * s.group();
      const scalar_t* src = qkv_p + b * T * ld;
      scalar_t* dst = gqkv_p + b * T * ld;
      const HeadRows k = head_rows(src + s.k_offset(h0), ld, s, rows.slot(1)),
                     v = head_rows(src + s.v_offset(h0), ld, s, rows.slot(2));
      const HeadOut<scalar_t> dk{dst + s.k_offset(h0), ld, rows.slot(5)}, dv{dst + s.v_offset(h0), ld, rows.slot(6)};
      const RowStarts st{starts_p ? starts_p + b * T : nullptr};
      for (int64_t h = h0; h < h0 + s.group(); ++h) {
        const int64_t bh = b * s.H + h;
        const HeadRows q = head_rows(src + s.q_offset(h), ld, s, rows.slot(0));
        const HeadRows gy = head_rows(gy_p + b * T * s.ld_y() + h * s.D, s.ld_y(), s, rows.slot(3));
        const HeadOut<scalar_t> dq{dst + s.q_offset(h), ld, rows.slot(4)};
        const HeadGrads g{q, k, v, gy, dq.p(), dq.ld(s), dk.p(), dv.p(), dk.ld(s)};
        head_backward(s, probs_p + bh * T * T, mask.of(bh, T, st, drawn.data_ptr<float>()), dp_rows.data_ptr<float>(),
                      mask.any() ? dropped.data_ptr<float>() : nullptr, st, g, h == h0 ? 0.f : 1.f);
        dq.finish(s);
      }
      dk.finish(s);
      dv.finish(s);
    }
  });
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedCausalAttention : torch::autograd::Function<FusedCausalAttention> {
  // The mask and its draws are passed by pointer: they need no gradient and may be absent.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& qkv_in, const at::Tensor* mask_in,
                            const DropoutDraws* draws, const at::Tensor* starts_in, int64_t kv_heads) {
    const at::Tensor qkv = qkv_in.contiguous();
    const at::Tensor mask = mask_in->defined() ? mask_in->contiguous() : at::Tensor();
    const at::Tensor starts = starts_in->defined() ? starts_in->contiguous() : at::Tensor();  // (B, T)
    const int64_t* starts_p = starts.defined() ? starts.const_data_ptr<int64_t>() : nullptr;
    const HeadMask head_mask{mask.defined() ? mask.const_data_ptr<float>() : nullptr,
                             draws->defined() ? draws : nullptr};
    const Shape s = shape_of(qkv, kv_heads);
    at::Tensor probs = at::empty({s.B, s.H, s.T, s.T}, qkv.options().dtype(at::kFloat));  // (B, H, T, T)
    at::Tensor y = at::empty({s.B, s.T, s.H, s.D}, qkv.options());                        // (B, T, H, D)
    if (qkv.scalar_type() == at::kBFloat16)
      attention_forward(s, qkv.const_data_ptr<c10::BFloat16>(), head_mask, starts_p, probs.data_ptr<float>(),
                        y.data_ptr<c10::BFloat16>());
    else
      attention_forward(s, qkv.const_data_ptr<float>(), head_mask, starts_p, probs.data_ptr<float>(),
                        y.data_ptr<float>());
    ctx->save_for_backward({qkv, probs});
    if (mask.defined()) ctx->saved_data["mask"] = mask;
    if (draws->defined()) ctx->saved_data["draws"] = draws->to_ints();  // drawn again, not kept
    if (starts.defined()) ctx->saved_data["starts"] = starts;
    ctx->saved_data["kv_heads"] = kv_heads;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& qkv = saved[0];
    const at::Tensor& probs = saved[1];
    const at::Tensor grad_y = grads[0].to(qkv.scalar_type()).contiguous();  // (B, T, H, D)
    const at::Tensor mask = ctx->saved_data.count("mask") ? ctx->saved_data["mask"].toTensor() : at::Tensor();
    const bool drawn = ctx->saved_data.count("draws") > 0;
    const DropoutDraws draws = drawn ? DropoutDraws::from_ints(ctx->saved_data["draws"].toIntVector()) : DropoutDraws();
    const HeadMask head_mask{mask.defined() ? mask.const_data_ptr<float>() : nullptr,
                             draws.defined() ? &draws : nullptr};
    const at::Tensor starts = ctx->saved_data.count("starts") ? ctx->saved_data["starts"].toTensor() : at::Tensor();
    const int64_t* starts_p = starts.defined() ? starts.const_data_ptr<int64_t>() : nullptr;
    const Shape s = shape_of(qkv, ctx->saved_data["kv_heads"].toInt());
    at::Tensor grad_qkv = at::empty_like(qkv);  // every element written
    if (qkv.scalar_type() == at::kBFloat16)
      attention_backward(s, qkv.const_data_ptr<c10::BFloat16>(), probs.const_data_ptr<float>(), head_mask, starts_p,
                         grad_y.const_data_ptr<c10::BFloat16>(), grad_qkv.data_ptr<c10::BFloat16>());
    else
      attention_backward(s, qkv.const_data_ptr<float>(), probs.const_data_ptr<float>(), head_mask, starts_p,
                         grad_y.const_data_ptr<float>(), grad_qkv.data_ptr<float>());
    return {grad_qkv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_attention_supports(const at::Tensor& qkv, const at::Tensor& dropout_mask,
                              const at::Tensor& document_starts) {
  const bool qkv_ok = qkv.dim() == 5 && qkv.size(2) == 3 && qkv.device().is_cpu() &&
                      (qkv.scalar_type() == at::kFloat || qkv.scalar_type() == at::kBFloat16);
  if (!qkv_ok) return false;
  const int64_t B = qkv.size(0), T = qkv.size(1), H = qkv.size(3);
  const bool mask_ok = !dropout_mask.defined() || (dropout_mask.device().is_cpu() &&
                                                   dropout_mask.scalar_type() == at::kFloat &&
                                                   dropout_mask.sizes() == at::IntArrayRef{B, H, T, T});
  const bool starts_ok = !document_starts.defined() ||
                         (document_starts.device().is_cpu() && document_starts.scalar_type() == at::kLong &&
                          document_starts.sizes() == at::IntArrayRef{B, T});
  return mask_ok && starts_ok;
}

at::Tensor fused_causal_attention(const at::Tensor& qkv, const at::Tensor& dropout_mask,
                                  const at::Tensor& document_starts) {
  SPMD_ASSERT(fused_attention_supports(qkv, dropout_mask, document_starts),
              "fused_causal_attention: needs float32 or bf16 qkv (B, T, 3, H, D), mask (B, H, T, T) and int64 document starts "
              "(B, T) on CPU, got {}, {} and {}",
              qkv.sizes().vec(), dropout_mask.defined() ? dropout_mask.sizes().vec() : std::vector<int64_t>{},
              document_starts.defined() ? document_starts.sizes().vec() : std::vector<int64_t>{});
  const DropoutDraws none;
  return FusedCausalAttention::apply(qkv, &dropout_mask, &none, &document_starts, qkv.dim() == 5 ? qkv.size(3) : 0);
}

at::Tensor fused_causal_attention(const at::Tensor& qkv, const DropoutDraws& dropout,
                                  const at::Tensor& document_starts) {
  SPMD_ASSERT(fused_attention_supports(qkv, at::Tensor(), document_starts), "fused_causal_attention: qkv {} starts {}",
              qkv.sizes().vec(), document_starts.defined() ? document_starts.sizes().vec() : std::vector<int64_t>{});
  const std::vector<int64_t> probs_shape{qkv.size(0), qkv.size(3), qkv.size(1), qkv.size(1)};  // (B, H, T, T)
  SPMD_ASSERT(!dropout.defined() || dropout.shape == probs_shape,
              "fused_causal_attention: dropout draws for a block {} with qkv {}", dropout.shape, qkv.sizes().vec());
  const at::Tensor no_mask;
  return FusedCausalAttention::apply(qkv, &no_mask, &dropout, &document_starts, qkv.size(3));
}

bool fused_grouped_attention_supports(const at::Tensor& packed, int64_t kv_heads, const at::Tensor& document_starts) {
  const bool packed_ok = packed.dim() == 4 && packed.device().is_cpu() && kv_heads > 0 &&
                         (packed.scalar_type() == at::kFloat || packed.scalar_type() == at::kBFloat16);
  if (!packed_ok) return false;
  const int64_t H = packed.size(2) - 2 * kv_heads;
  const bool starts_ok = !document_starts.defined() ||
                         (document_starts.device().is_cpu() && document_starts.scalar_type() == at::kLong &&
                          document_starts.sizes() == at::IntArrayRef{packed.size(0), packed.size(1)});
  return H > 0 && H % kv_heads == 0 && starts_ok;
}

at::Tensor fused_grouped_attention(const at::Tensor& packed, int64_t kv_heads, const DropoutDraws& dropout,
                                   const at::Tensor& document_starts) {
  SPMD_ASSERT(fused_grouped_attention_supports(packed, kv_heads, document_starts),
              "fused_grouped_attention: needs float32 or bf16 (B, T, H + 2 Hkv, D) with H a multiple of Hkv = {} on "
              "CPU and int64 document starts (B, T), got {}",
              kv_heads, packed.sizes().vec());
  const int64_t H = packed.size(2) - 2 * kv_heads;
  const std::vector<int64_t> probs_shape{packed.size(0), H, packed.size(1), packed.size(1)};  // (B, H, T, T)
  SPMD_ASSERT(!dropout.defined() || dropout.shape == probs_shape,
              "fused_grouped_attention: dropout draws for a block {} with packed qkv {}", dropout.shape,
              packed.sizes().vec());
  const at::Tensor no_mask;
  return FusedCausalAttention::apply(packed, &no_mask, &dropout, &document_starts, kv_heads);
}

}  // namespace spmd::kernels::cpu
