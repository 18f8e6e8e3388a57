// One block of attention, per (batch row, head) task, in row blocks of kRowBlock queries:
//   forward   S = Q K^T scale over the keys the row block can see, P = softmax over each row's
//             visible keys (zero elsewhere), lse, out = (P m) V
//   backward  P = exp(S - lse), dP = dO V^T m, dS = P (dP - row_dot) scale,
//             dV += (P m)^T dO, dQ += dS K, dK += dS^T Q
// Row i sees keys [first_i, end_i): from its document's start, up to its own position. Both bounds
// never decrease along the rows, so row block [i0, i1) needs keys [first_i0, end_i1-1) only, and no
// masked score is ever exponentiated (libtorch's exp of -inf takes a slow path on the CPU).
#include "kernels/cpu/block_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <ATen/Parallel.h>

#include "kernels/cpu/cpu_gemm.h"
#include "kernels/cpu/row_reductions.h"

// Lets GCC if-convert, so the row loops vectorize (see vector_math.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include "kernels/cpu/vector_math.h"

namespace spmd::kernels::cpu {

namespace {

// The keys [first(i), end(i)) that query row i of one batch row sees, as indices into the block.
struct VisibleKeys {
  const int64_t* starts;  // this batch row's document starts, or null
  int64_t q_begin, k_begin, m;
  int64_t first(int64_t i) const { return std::clamp((starts ? starts[i] : 0) - k_begin, int64_t{0}, m); }
  int64_t end(int64_t i) const { return std::clamp(q_begin + i + 1 - k_begin, int64_t{0}, m); }
};

// Rows of one (batch row, head) of a (B, H, rows, cols) tensor: row r at at(r).
template <typename T>
struct HeadRows {
  T* p;
  int64_t ld;
  HeadRows(const at::Tensor& t, int64_t b, int64_t h)
      : p(t.defined() ? t.data_ptr<float>() + b * t.stride(0) + h * t.stride(1) : nullptr),
        ld(t.defined() ? t.stride(2) : 0) {}
  T* at(int64_t r) const { return p + r * ld; }
};
using In = HeadRows<const float>;
using Out = HeadRows<float>;

// The row block's rows (row i at s + (i - i0) * ld, keys c0 .. c0 + width) in place -> the
// softmax over each row's visible keys times the dropout multipliers, zero elsewhere; lse per row.
SPMD_VECTOR_CLONES
void softmax_rows(float* s, int64_t ld, int64_t i0, int64_t i1, int64_t c0, int64_t width, const VisibleKeys& vis,
                  const In& mask, const Out& lse) {
  for (int64_t i = i0; i < i1; ++i) {
    float* row = s + (i - i0) * ld;
    const int64_t a = vis.first(i) - c0, e = vis.end(i) - c0;
    if (e <= a) {
      std::fill(row, row + width, 0.f);
      *lse.at(i) = -std::numeric_limits<float>::infinity();
      continue;
    }
    const float mx = row_max(row + a, e - a);
    for (int64_t j = a; j < e; ++j) row[j] = vecmath::exp_approx(row[j] - mx);
    const float sum = row_dot(row + a, nullptr, e - a), inv = 1.f / sum;
    *lse.at(i) = mx + std::log(sum);
    if (mask.p) {
      const float* mrow = mask.at(i) + c0;
      for (int64_t j = a; j < e; ++j) row[j] *= inv * mrow[j];
    } else {
      for (int64_t j = a; j < e; ++j) row[j] *= inv;
    }
    std::fill(row, row + a, 0.f);
    std::fill(row + e, row + width, 0.f);
  }
}

// The row block's scores p and dO V^T dp (same layout as softmax_rows) in place -> P (times the
// dropout multipliers into pd, when given) and dS; zero outside each row's visible keys.
SPMD_VECTOR_CLONES
void softmax_backward_rows(float* p, float* dp, float* pd, int64_t ld, int64_t i0, int64_t i1, int64_t c0,
                           int64_t width, const VisibleKeys& vis, const In& mask, const In& lse, const In& row_dot_of,
                           float scale) {
  for (int64_t i = i0; i < i1; ++i) {
    float *prow = p + (i - i0) * ld, *dprow = dp + (i - i0) * ld, *pdrow = pd ? pd + (i - i0) * ld : nullptr;
    const float l = *lse.at(i), rd = *row_dot_of.at(i);
    int64_t a = vis.first(i) - c0, e = vis.end(i) - c0;
    if (std::isinf(l)) a = e = 0;  // a query that sees no key at all
    for (int64_t j = a; j < e; ++j) prow[j] = vecmath::exp_approx(prow[j] - l);
    if (mask.p) {
      const float* mrow = mask.at(i) + c0;
      for (int64_t j = a; j < e; ++j) dprow[j] *= mrow[j];
      for (int64_t j = a; j < e; ++j) pdrow[j] = prow[j] * mrow[j];
    }
    for (int64_t j = a; j < e; ++j) dprow[j] = prow[j] * (dprow[j] - rd) * scale;
    for (float* row : {prow, dprow, pdrow}) {
      if (!row) continue;
      std::fill(row, row + a, 0.f);
      std::fill(row + e, row + width, 0.f);
    }
  }
}

struct Dims {
  int64_t B, H, n, m, D;
  float scale;
  explicit Dims(const AttentionBlock& b)
      : B(b.q.size(0)), H(b.q.size(1)), n(b.q.size(2)), m(b.k.size(2)), D(b.q.size(3)),
        scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(b.q.size(3))))) {}
};

at::Tensor contiguous_or_none(const at::Tensor& t) { return t.defined() ? t.contiguous() : at::Tensor(); }

VisibleKeys visible_keys(const AttentionBlock& block, const at::Tensor& starts, int64_t b, const Dims& d) {
  return {starts.defined() ? starts.data_ptr<int64_t>() + b * d.n : nullptr, block.q_begin, block.k_begin, d.m};
}

at::Tensor scratch(int64_t rows, int64_t cols) {
  return at::empty({rows, cols}, at::TensorOptions().dtype(at::kFloat));
}

bool cpu_float(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 4 && (t.size(3) == 1 || t.stride(3) == 1);
}

}  // namespace

bool block_attention_supports(const AttentionBlock& block, const std::vector<at::Tensor>& more) {
  for (const at::Tensor* t : {&block.q, &block.k, &block.v})
    if (!cpu_float(*t)) return false;
  for (const at::Tensor& t : more)
    if (!cpu_float(t)) return false;
  const at::Tensor& starts = block.q_document_starts;
  return (!block.dropout_mask.defined() || cpu_float(block.dropout_mask)) &&
         (!starts.defined() || (starts.device().is_cpu() && starts.scalar_type() == at::kLong));
}

BlockAttention fused_block_attention(const AttentionBlock& block) {
  const Dims d(block);
  const at::Tensor starts = contiguous_or_none(block.q_document_starts);
  BlockAttention r{at::empty({d.B, d.H, d.n, d.D}, block.q.options()),
                   at::empty({d.B, d.H, d.n, 1}, block.q.options())};
  at::parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    const at::Tensor scores = scratch(kRowBlock, d.m);
    float* s = scores.data_ptr<float>();
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      const In q(block.q, b, h), k(block.k, b, h), v(block.v, b, h), mask(block.dropout_mask, b, h);
      const Out out(r.out, b, h), lse(r.lse, b, h);
      const VisibleKeys vis = visible_keys(block, starts, b, d);
      for (int64_t i0 = 0; i0 < d.n; i0 += kRowBlock) {
        const int64_t i1 = std::min(d.n, i0 + kRowBlock), c0 = vis.first(i0), width = vis.end(i1 - 1) - c0;
        if (width > 0) gemm(false, true, i1 - i0, width, d.D, d.scale, q.at(i0), q.ld, k.at(c0), k.ld, 0.f, s, d.m);
        softmax_rows(s, d.m, i0, i1, c0, std::max(width, int64_t{0}), vis, mask, lse);
        if (width > 0)
          gemm(false, false, i1 - i0, d.D, width, 1.f, s, d.m, v.at(c0), v.ld, 0.f, out.at(i0), out.ld);
        else
          for (int64_t i = i0; i < i1; ++i) std::fill(out.at(i), out.at(i) + d.D, 0.f);
      }
    }
  });
  return r;
}

void fused_block_attention_backward(const AttentionBlock& block, const BlockGradients& g) {
  const Dims d(block);
  const at::Tensor starts = contiguous_or_none(block.q_document_starts);
  at::parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    const at::Tensor probs = scratch(kRowBlock, d.m), grads = scratch(kRowBlock, d.m);
    const at::Tensor dropped = scratch(block.dropout_mask.defined() ? kRowBlock : 0, d.m);
    float *p = probs.data_ptr<float>(), *dp = grads.data_ptr<float>();
    float* pd = block.dropout_mask.defined() ? dropped.data_ptr<float>() : nullptr;
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      const In q(block.q, b, h), k(block.k, b, h), v(block.v, b, h), mask(block.dropout_mask, b, h);
      const In d_out(g.d_out, b, h), lse(g.lse, b, h), row_dot(g.row_dot, b, h);
      const Out dq(g.dq, b, h), dk(g.dk, b, h), dv(g.dv, b, h);
      const VisibleKeys vis = visible_keys(block, starts, b, d);
      for (int64_t i0 = 0; i0 < d.n; i0 += kRowBlock) {
        const int64_t i1 = std::min(d.n, i0 + kRowBlock), rows = i1 - i0, c0 = vis.first(i0);
        const int64_t width = vis.end(i1 - 1) - c0;
        if (width <= 0) continue;
        gemm(false, true, rows, width, d.D, d.scale, q.at(i0), q.ld, k.at(c0), k.ld, 0.f, p, d.m);
        gemm(false, true, rows, width, d.D, 1.f, d_out.at(i0), d_out.ld, v.at(c0), v.ld, 0.f, dp, d.m);
        softmax_backward_rows(p, dp, pd, d.m, i0, i1, c0, width, vis, mask, lse, row_dot, d.scale);
        gemm(true, false, width, d.D, rows, 1.f, pd ? pd : p, d.m, d_out.at(i0), d_out.ld, 1.f, dv.at(c0), dv.ld);
        gemm(false, false, rows, d.D, width, 1.f, dp, d.m, k.at(c0), k.ld, 1.f, dq.at(i0), dq.ld);
        gemm(true, false, width, d.D, rows, 1.f, dp, d.m, q.at(i0), q.ld, 1.f, dk.at(c0), dk.ld);
      }
    }
  });
}

}  // namespace spmd::kernels::cpu
