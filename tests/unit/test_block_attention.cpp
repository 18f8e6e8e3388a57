// kernels::block_attention and its backward (the blocks ring attention merges) against a plain
// computation: the visible keys listed by loops over positions, softmax and autograd in float64.
// float32 takes the fused CPU kernel, float64 the device-generic ops.
#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "kernels/cpu/block_attention.h"
#include "kernels/kernels.h"

#include "doctest_check.h"

using namespace spmd;

namespace {

struct BlockCase {
  int64_t n, m, q_begin, k_begin;
  std::vector<int64_t> starts;  // per query, the same for every batch row shifted by b; empty: none
  bool dropout;
};

// (B, 1, n, m): true where query i does not see key j, by the definition in attention_block.h.
at::Tensor hidden_by_loops(const BlockCase& c, int64_t B) {
  at::Tensor hidden = at::zeros({B, 1, c.n, c.m}, at::kBool);
  auto h = hidden.accessor<bool, 4>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < c.n; ++i)
      for (int64_t j = 0; j < c.m; ++j) {
        const int64_t key = c.k_begin + j, query = c.q_begin + i;
        const int64_t start = c.starts.empty() ? 0 : std::min(c.starts[i] + b, query);
        h[b][0][i][j] = key > query || key < start;
      }
  return hidden;
}

at::Tensor starts_tensor(const BlockCase& c, int64_t B) {
  if (c.starts.empty()) return at::Tensor();
  const at::Tensor base = at::tensor(c.starts, at::kLong).unsqueeze(0) + at::arange(B, at::kLong).unsqueeze(1);
  return at::minimum(base, at::arange(c.q_begin, c.q_begin + c.n, at::kLong).unsqueeze(0));  // (B, n)
}

// The whole attention of the block in float64 with autograd: out, lse.
std::pair<at::Tensor, at::Tensor> reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& hidden, const at::Tensor& mask) {
  const at::Tensor s = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  const at::Tensor lse = at::logsumexp(s.masked_fill(hidden, -INFINITY), -1, true);
  const at::Tensor none = at::isinf(lse);  // a query that sees no key: probabilities 0
  const at::Tensor p =
      at::softmax(s.masked_fill(hidden, -INFINITY).masked_fill(none, 0), -1).masked_fill(hidden | none, 0);
  return {at::matmul(mask.defined() ? p * mask : p, v), lse};
}

void check_case(const BlockCase& c, at::ScalarType dtype, bool backward) {
  at::manual_seed(7);
  const int64_t B = 2, H = 3, D = 8;
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor q = at::randn({B, H, c.n, D}, f64).mul_(2), k = at::randn({B, H, c.m, D}, f64).mul_(2);
  at::Tensor v = at::randn({B, H, c.m, D}, f64);
  const at::Tensor mask = c.dropout ? (at::rand({B, H, c.n, c.m}, f64) > 0.2).to(at::kDouble) / 0.8 : at::Tensor();
  const at::Tensor hidden = hidden_by_loops(c, B);
  const at::Tensor block_mask = mask.defined() ? mask.to(dtype) : at::Tensor();
  kernels::AttentionBlock block{q.to(dtype), k.to(dtype), v.to(dtype), c.q_begin, c.k_begin, block_mask,
                                starts_tensor(c, B)};
  CHECK(kernels::cpu::block_attention_supports(block) == (dtype == at::kFloat));
  const double tol = dtype == at::kFloat ? 1e-5 : 1e-12;
  q.requires_grad_(true), k.requires_grad_(true), v.requires_grad_(true);
  const auto [out_ref, lse_ref] = reference(q, k, v, hidden, mask);
  const auto [out, lse] = kernels::block_attention(block);
  CHECK(at::allclose(out.to(at::kDouble), out_ref, tol, tol));
  CHECK(at::equal(at::isinf(lse), at::isinf(lse_ref)));
  CHECK(at::allclose(lse.to(at::kDouble).masked_fill(at::isinf(lse), 0), lse_ref.masked_fill(at::isinf(lse_ref), 0),
                     tol, tol));
  if (!backward) return;
  const at::Tensor d_out = at::randn({B, H, c.n, D}, f64);
  const auto grads = torch::autograd::grad({out_ref}, {q, k, v}, {d_out});
  // Accumulated in place: start from ones.
  const at::Tensor row_dot = (d_out * out_ref).sum(-1, true).detach().to(dtype);
  kernels::BlockGradients g{d_out.to(dtype), lse, row_dot, at::ones({B, H, c.n, D}, dtype),
                            at::ones({B, H, c.m, D}, dtype), at::ones({B, H, c.m, D}, dtype)};
  kernels::block_attention_backward(block, g);
  CHECK(at::allclose(g.dq.to(at::kDouble) - 1, grads[0], tol * 10, tol * 10));
  CHECK(at::allclose(g.dk.to(at::kDouble) - 1, grads[1], tol * 10, tol * 10));
  CHECK(at::allclose(g.dv.to(at::kDouble) - 1, grads[2], tol * 10, tol * 10));
}

// Non-decreasing document starts for n queries from position q_begin, each <= its position.
std::vector<int64_t> documents(int64_t n, int64_t q_begin, std::vector<int64_t> boundaries) {
  std::vector<int64_t> starts(static_cast<size_t>(n));
  int64_t start = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t b : boundaries)
      if (b <= q_begin + i) start = std::max(start, b);
    starts[static_cast<size_t>(i)] = start;
  }
  return starts;
}

}  // namespace

TEST_CASE("kernels::block_attention: the causal diagonal, fused float32 and generic float64") {
  for (at::ScalarType dtype : {at::kFloat, at::kDouble})
    for (bool dropout : {false, true}) check_case({37, 37, 70, 70, {}, dropout}, dtype, true);
}

TEST_CASE("kernels::block_attention: packed documents on the diagonal and below it, with dropout") {
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    // Keys 70..106 against queries 70..106: documents start at 75 and 90 (some keys hidden).
    check_case({37, 37, 70, 70, documents(37, 70, {40, 75, 90}), true}, dtype, true);
    // Queries 140..179 against keys 60..99 (every key earlier): a document from 52 and from 81, so
    // rows see the block's tail only.
    check_case({40, 40, 140, 60, documents(40, 140, {52, 81}), false}, dtype, true);
  }
}

TEST_CASE("kernels::block_attention: queries that see no key of the block have lse -inf and output 0") {
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    // Queries 100..136 over keys 0..36; documents start at 20, 30 and 110 (later rows see none).
    check_case({37, 37, 100, 0, documents(37, 100, {20, 30, 110}), true}, dtype, false);
    // Every query's document starts after the block's last key.
    check_case({33, 37, 100, 0, documents(33, 100, {50}), false}, dtype, false);
  }
}
