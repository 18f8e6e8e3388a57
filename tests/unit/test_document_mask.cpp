// Packed documents (data.document_mask): document starts from the tokens, and every attention
// kernel that takes them (the fused CPU kernel, the SDPA and explicit paths, attention at
// positions) against a plain libtorch reference with an explicit (B, T, T) block-diagonal causal
// mask built from document ids, values and gradients, with and without a dropout mask.
#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "kernels/cpu/cpu_gemm.h"
#include "kernels/cpu/fused_attention.h"
#include "kernels/kernels.h"
#include "train/documents.h"

#include "reference_attention.h"

#include "doctest_check.h"

using namespace spmd;

namespace {

using spmd::test::reference_attention;

constexpr int64_t kEot = 0;

// Token rows with documents of random lengths 1..max_length (an end-of-text token ends each; the
// windows start and end mid-document, and one row holds a single document).
at::Tensor packed_ids(int64_t B, int64_t T, int64_t max_length, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor ids = at::randint(1, 50, {B, T}, at::kLong);
  auto a = ids.accessor<int64_t, 2>();
  for (int64_t b = 1; b < B; ++b) {  // row 0: no end-of-text token at all
    int64_t t = at::randint(0, max_length, {1}).item<int64_t>();
    while (t < T) {
      a[b][t] = kEot;
      t += 1 + at::randint(0, max_length, {1}).item<int64_t>();
    }
  }
  if (B > 2) a[2][0] = kEot;  // a window whose first token ends a document
  return ids;
}

// The keys each query sees, from document ids counted by a plain loop: (B, T, T) bool.
at::Tensor block_diagonal_causal(const at::Tensor& ids) {
  const int64_t B = ids.size(0), T = ids.size(1);
  std::vector<int64_t> doc(static_cast<size_t>(T));
  at::Tensor visible = at::zeros({B, T, T}, at::kBool);
  auto v = visible.accessor<bool, 3>();
  auto a = ids.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t id = 0;
    for (int64_t t = 0; t < T; ++t) {
      doc[static_cast<size_t>(t)] = id;
      if (a[b][t] == kEot) ++id;  // the end-of-text token belongs to the document it ends
    }
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j <= i; ++j) v[b][i][j] = doc[static_cast<size_t>(i)] == doc[static_cast<size_t>(j)];
  }
  return visible;
}

struct MaskCase {
  int64_t B, T, H, D, max_length;
};

struct Compared {
  double y = 0, grad = 0;  // the largest absolute differences
};

// attend(qkv, mask) against the reference's values and qkv gradients.
template <typename Attend>
Compared compare(const MaskCase& c, bool with_mask, at::ScalarType dtype, Attend attend) {
  const at::Tensor ids = packed_ids(c.B, c.T, c.max_length, 11);
  at::Tensor qkv = at::randn({c.B, c.T, 3, c.H, c.D}, dtype).mul_(2.0).requires_grad_(true);
  at::Tensor mask = with_mask ? (at::rand({c.B, c.H, c.T, c.T}) > 0.2).to(dtype) / 0.8 : at::Tensor();
  const at::Tensor grad_out = at::randn({c.B, c.T, c.H, c.D}, dtype);
  const at::Tensor y_ref = reference_attention(qkv, mask, block_diagonal_causal(ids));
  const at::Tensor g_ref = torch::autograd::grad({y_ref}, {qkv}, {grad_out})[0];
  const at::Tensor y = attend(qkv, mask, document_starts(ids, kEot));
  const at::Tensor g = torch::autograd::grad({y}, {qkv}, {grad_out})[0];
  REQUIRE(y.sizes() == y_ref.sizes());
  return {(y - y_ref).abs().max().item<double>(), (g - g_ref).abs().max().item<double>()};
}

const std::vector<MaskCase> kCases{{2, 1, 1, 4, 3},  {3, 7, 3, 8, 3},   {3, 32, 2, 16, 5},
                               {3, 64, 4, 32, 9}, {3, 100, 2, 24, 40}, {2, 130, 2, 8, 2}};

}  // namespace

TEST_CASE("document mask: starts restart after each end-of-text token, which belongs to its document") {
  const at::Tensor ids = at::tensor(std::vector<int64_t>{5, kEot, 3, kEot, kEot, 7, 8, 9}, at::kLong).view({1, 8});
  const at::Tensor want = at::tensor(std::vector<int64_t>{0, 0, 2, 2, 4, 5, 5, 5}, at::kLong).view({1, 8});
  CHECK(at::equal(document_starts(ids, kEot), want));
  // Against the document ids of the plain loop: a key is visible exactly from the start on.
  const at::Tensor many = packed_ids(4, 90, 7, 3);
  const at::Tensor starts = document_starts(many, kEot);
  const at::Tensor keys = at::arange(90, at::kLong);
  const at::Tensor from_starts = (keys.view({1, 1, 90}) >= starts.unsqueeze(-1)) & (keys.view({1, 1, 90}) <= keys.view({1, 90, 1}));
  CHECK(at::equal(from_starts, block_diagonal_causal(many)));
  CHECK(at::equal(document_starts(many.select(0, 0).unsqueeze(0), kEot), at::zeros({1, 90}, at::kLong)));
}

TEST_CASE("document mask: the fused CPU kernel matches the block-diagonal causal reference, values and gradients") {
  for (const MaskCase& c : kCases) {
    CAPTURE(c.T);
    CAPTURE(c.max_length);
    for (bool force_aten : {false, true}) {
      CAPTURE(force_aten);
      kernels::cpu::detail::force_aten_gemm(force_aten);
      for (bool with_mask : {false, true}) {
        CAPTURE(with_mask);
        const Compared d = compare(c, with_mask, at::kFloat, [](const at::Tensor& qkv, const at::Tensor& mask,
                                                                const at::Tensor& starts) {
          REQUIRE(kernels::cpu::fused_attention_supports(qkv, mask, starts));
          return kernels::cpu::fused_causal_attention(qkv, mask, starts);
        });
        CHECK(d.y < 1e-5);
        CHECK(d.grad < 1e-4);
      }
    }
  }
  kernels::cpu::detail::force_aten_gemm(false);
}

TEST_CASE("document mask: the dispatcher's SDPA and explicit (dropout) paths match the reference") {
  // float64 is not the fused kernel's: without a mask SDPA with a boolean mask, with one the
  // explicit path. float32 goes to the fused kernel through the same entry.
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    for (bool with_mask : {false, true}) {
      CAPTURE(with_mask);
      const Compared d = compare({3, 45, 2, 8, 6}, with_mask, dtype, [](const at::Tensor& qkv, const at::Tensor& mask,
                                                                         const at::Tensor& starts) {
        return kernels::causal_attention(qkv, mask, qkv.scalar_type(), starts);
      });
      const double tolerance = dtype == at::kDouble ? 1e-10 : 1e-4;
      CHECK(d.y < tolerance);
      CHECK(d.grad < tolerance * 10);
    }
  }
}

TEST_CASE("document mask: attention at positions (context parallelism's all-gather) matches the reference rows") {
  // Queries at a head-tail subset of the positions (as a context-parallel rank holds them), keys
  // all positions in order: the reference's rows at those positions.
  const int64_t B = 3, T = 48, H = 2, D = 8;
  const at::Tensor ids = packed_ids(B, T, 5, 17);
  const at::Tensor positions = at::cat({at::arange(12, 24, at::kLong), at::arange(24, 36, at::kLong)});
  at::Tensor qkv = at::randn({B, T, 3, H, D}, at::kDouble).requires_grad_(true);
  at::Tensor mask = (at::rand({B, H, T, T}, at::kDouble) > 0.2).to(at::kDouble) / 0.8;
  const at::Tensor grad_out = at::randn({B, positions.size(0), H, D}, at::kDouble);
  const at::Tensor y_ref = reference_attention(qkv, mask, block_diagonal_causal(ids)).index_select(1, positions);
  const at::Tensor g_ref = torch::autograd::grad({y_ref}, {qkv}, {grad_out})[0];
  const at::Tensor starts = document_starts(ids, kEot).index_select(1, positions);
  const at::Tensor y = kernels::attention_at_positions(qkv.select(2, 0).index_select(1, positions), qkv.select(2, 1),
                                                       qkv.select(2, 2), positions, mask.index_select(2, positions), starts);
  const at::Tensor g = torch::autograd::grad({y}, {qkv}, {grad_out})[0];
  CHECK((y - y_ref).abs().max().item<double>() < 1e-10);
  CHECK((g - g_ref).abs().max().item<double>() < 1e-10);
}

TEST_CASE("document mask: one document spanning the window changes nothing, bit for bit, in the fused kernel") {
  // The no-mask path's speed is kept by leaving it as it was: starts all 0 must give its bits.
  at::manual_seed(9);
  at::Tensor qkv = at::randn({2, 70, 3, 3, 16}).requires_grad_(true);
  const at::Tensor grad_out = at::randn({2, 70, 3, 16});
  const at::Tensor y0 = kernels::cpu::fused_causal_attention(qkv);
  const at::Tensor g0 = torch::autograd::grad({y0}, {qkv}, {grad_out})[0];
  const at::Tensor y1 = kernels::cpu::fused_causal_attention(qkv, at::Tensor(), at::zeros({2, 70}, at::kLong));
  const at::Tensor g1 = torch::autograd::grad({y1}, {qkv}, {grad_out})[0];
  CHECK(at::equal(y0, y1));
  CHECK(at::equal(g0, g1));
}
