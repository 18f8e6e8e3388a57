// Context parallelism's pieces that need no process group: the head-tail cut of a sequence, the
// positions it gives each member, and attention at those positions against the rows of the whole
// sequence's causal attention (values and gradients, with a dropout mask).
#include <set>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "kernels/kernels.h"
#include "parallel/context_parallel.h"

#include "reference_attention.h"

#include "doctest_check.h"

using namespace spmd;

TEST_CASE("context chunks: every member holds chunks r and 2cp-1-r, together each position once") {
  for (int64_t cp : {1, 2, 4}) {
    CAPTURE(cp);
    const int64_t T = 16;
    const at::Tensor sequence = at::arange(T).reshape({1, T});
    std::multiset<int64_t> seen;
    for (int64_t r = 0; r < cp; ++r) {
      const ContextSplit split{cp, r};
      const at::Tensor mine = take_context_chunks(sequence, 1, split).reshape({-1});
      const at::Tensor positions = context_positions(T / cp, split, at::kCPU);
      REQUIRE(mine.numel() == T / cp);
      CHECK(at::equal(mine, positions));  // the cut and the positions agree
      const int64_t chunk = T / (2 * cp);
      CHECK(mine[0].item<int64_t>() == r * chunk);
      CHECK(mine[chunk].item<int64_t>() == (2 * cp - 1 - r) * chunk);
      for (int64_t i = 0; i < mine.numel(); ++i) seen.insert(mine[i].item<int64_t>());
    }
    CHECK(seen.size() == static_cast<size_t>(T));
    CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == static_cast<size_t>(T));
  }
}

TEST_CASE("attention_at_positions: a member's queries over all keys equal those rows of causal attention") {
  at::manual_seed(3);
  const int64_t B = 2, T = 16, H = 2, D = 8, cp = 2;
  const at::Tensor qkv = at::randn({B, T, 3, H, D}).requires_grad_(true);
  const at::Tensor mask = (at::rand({B, H, T, T}) > 0.1).to(at::kFloat) / 0.9;
  const at::Tensor grad_out = at::randn({B, T, H, D});
  const at::Tensor y_ref = test::reference_attention(qkv, mask);
  const at::Tensor g_ref = torch::autograd::grad({y_ref}, {qkv}, {grad_out})[0];
  at::Tensor g_sum = at::zeros_like(qkv);
  for (int64_t r = 0; r < cp; ++r) {
    CAPTURE(r);
    const ContextSplit split{cp, r};
    const at::Tensor positions = context_positions(T / cp, split, at::kCPU);
    const at::Tensor q = take_context_chunks(qkv.select(2, 0), 1, split);
    const at::Tensor rows = mask.index_select(2, positions);  // the (B, H, T/cp, T) rows of the mask
    const at::Tensor y = kernels::attention_at_positions(q, qkv.select(2, 1), qkv.select(2, 2), positions, rows);
    CHECK(at::allclose(y, y_ref.index_select(1, positions), 1e-5, 1e-6));
    g_sum += torch::autograd::grad({y}, {qkv}, {grad_out.index_select(1, positions)})[0];
  }
  // The members' gradients sum to the whole sequence's (as the reduce-scatter of K/V sums them).
  CHECK(at::allclose(g_sum, g_ref, 1e-4, 1e-5));
}
