// fused_causal_attention against the unfused libtorch computation: values and gradients, with and
// without a dropout mask, through the process's BLAS and through at::addmm_out.
#include <cmath>
#include <cstdlib>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include "kernels/cpu/cpu_gemm.h"
#include "kernels/cpu/fused_attention.h"

#include "reference_attention.h"

#include "doctest_check.h"

using namespace spmd::kernels;
using namespace spmd::kernels::cpu;

namespace {

using spmd::test::reference_attention;

struct AttentionCase {
  int64_t B, T, H, D;
};

void check_against_reference(const AttentionCase& c, bool with_mask) {
  at::manual_seed(7);
  at::Tensor qkv = at::randn({c.B, c.T, 3, c.H, c.D}).mul_(2.0).requires_grad_(true);
  at::Tensor mask;
  if (with_mask) mask = (at::rand({c.B, c.H, c.T, c.T}) > 0.2).to(at::kFloat) / 0.8;
  at::Tensor grad_out = at::randn({c.B, c.T, c.H, c.D});

  at::Tensor y_ref = reference_attention(qkv, mask);
  at::Tensor g_ref = torch::autograd::grad({y_ref}, {qkv}, {grad_out})[0];
  at::Tensor y = fused_causal_attention(qkv, mask);
  at::Tensor g = torch::autograd::grad({y}, {qkv}, {grad_out})[0];

  CHECK(y.sizes() == y_ref.sizes());
  CHECK(g.sizes() == qkv.sizes());
  CHECK(at::allclose(y, y_ref, 1e-5, 1e-5));
  CHECK(at::allclose(g, g_ref, 1e-4, 1e-5));
  MESSAGE("max |dy| " << (y - y_ref).abs().max().item<float>() << ", max |dgrad| "
                      << (g - g_ref).abs().max().item<float>());
}

}  // namespace

TEST_CASE("fused attention: values and gradients match the unfused computation") {
  // Row blocks of 32: T below, at and across block boundaries; one and several heads.
  for (const AttentionCase& c : {AttentionCase{2, 1, 1, 4}, AttentionCase{2, 7, 3, 8}, AttentionCase{3, 32, 2, 16}, AttentionCase{2, 64, 4, 32}, AttentionCase{1, 100, 2, 24}}) {
    CAPTURE(c.B);
    CAPTURE(c.T);
    CAPTURE(c.H);
    CAPTURE(c.D);
    for (bool force_aten : {false, true}) {
      CAPTURE(force_aten);
      cpu::detail::force_aten_gemm(force_aten);
      check_against_reference(c, false);
      check_against_reference(c, true);
    }
  }
  cpu::detail::force_aten_gemm(false);
}

TEST_CASE("fused attention: the same numbers on 1 and 2 threads") {
  const int threads = at::get_num_threads();
  at::manual_seed(3);
  at::Tensor qkv = at::randn({3, 40, 3, 5, 8}).requires_grad_(true);
  at::Tensor grad_out = at::randn({3, 40, 5, 8});
  auto run = [&](int n) {
    at::set_num_threads(n);
    at::Tensor y = fused_causal_attention(qkv);
    return std::make_pair(y, torch::autograd::grad({y}, {qkv}, {grad_out})[0]);
  };
  auto [y1, g1] = run(1);
  auto [y2, g2] = run(2);
  at::set_num_threads(threads);
  CHECK(at::equal(y1, y2));  // heads are independent tasks: bit-identical
  CHECK(at::equal(g1, g2));
}

TEST_CASE("fused attention: a non-contiguous input and a qkv that is not float32") {
  at::Tensor big = at::randn({2, 9, 3, 2, 8}).transpose(0, 1).contiguous().transpose(0, 1);  // strided view
  CHECK_FALSE(big.is_contiguous());
  CHECK(at::allclose(fused_causal_attention(big), reference_attention(big, at::Tensor()), 1e-5, 1e-5));
  CHECK_FALSE(fused_attention_supports(big.to(at::kDouble)));
  CHECK_FALSE(fused_attention_supports(at::randn({2, 9, 3, 8})));
}

TEST_CASE("fused attention: with a dropout mask, the same bits whatever the heap held before") {
  // Runtime.remat=selective replays the attention after other allocations than the first pass
  // made: the kernel's scratch must not inherit the heap's alignment (MKL's sgemm rounds by it).
  at::manual_seed(5);
  at::Tensor qkv = at::randn({2, 70, 3, 3, 24}).requires_grad_(true);
  at::Tensor mask = (at::rand({2, 3, 70, 70}) > 0.1).to(at::kFloat) / 0.9;
  at::Tensor grad_out = at::randn({2, 70, 3, 24});
  auto run = [&] {
    at::Tensor y = fused_causal_attention(qkv, mask);
    return std::make_pair(y, torch::autograd::grad({y}, {qkv}, {grad_out})[0]);
  };
  auto [y0, g0] = run();
  for (size_t shift = 8; shift <= 64; shift += 8) {
    CAPTURE(shift);
    std::vector<void*> held;  // small blocks of odd sizes move where the next vectors land
    for (int i = 0; i < 16; ++i) held.push_back(std::malloc(shift * (i + 1) + 8));
    auto [y, g] = run();
    for (void* p : held) std::free(p);
    CHECK(at::equal(y, y0));
    CHECK(at::equal(g, g0));
  }
}

TEST_CASE("fused attention: dropout given as its draws has the bits of the materialized mask") {
  // A rank's block of a global (B, H, T, T) mask at an offset (data-parallel rows, tensor-parallel
  // heads), float32 and bf16 qkv, with and without packed documents: the kernel that draws each
  // head's multipliers itself gives exactly the values and gradients of the one handed the mask.
  const int64_t B = 2, T = 37, H = 3, D = 16;
  const DropoutDraws draws({B, H, T, T}, {6, 9, T, T}, {4, 3, 0, 0}, 0x9e3779b97f4a7c15ull, 0.3);
  const at::Tensor mask = draws.materialize(at::kCPU);
  CHECK(mask.eq(0).any().item<bool>());
  at::Tensor starts = at::zeros({B, T}, at::kLong);
  starts.narrow(1, 20, T - 20).fill_(20);  // row 0: a second document from position 20
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const bool documents : {false, true}) {
      CAPTURE(dtype);
      CAPTURE(documents);
      at::manual_seed(11);
      const at::Tensor qkv = at::randn({B, T, 3, H, D}).to(dtype).requires_grad_(true);
      const at::Tensor grad_out = at::randn({B, T, H, D}).to(dtype);
      const at::Tensor doc = documents ? starts : at::Tensor();
      const at::Tensor y_mask = fused_causal_attention(qkv, mask, doc);
      const at::Tensor g_mask = torch::autograd::grad({y_mask}, {qkv}, {grad_out})[0];
      const at::Tensor y_draws = fused_causal_attention(qkv, draws, doc);
      const at::Tensor g_draws = torch::autograd::grad({y_draws}, {qkv}, {grad_out})[0];
      CHECK(at::equal(y_draws, y_mask));
      CHECK(at::equal(g_draws, g_mask));
      CHECK_FALSE(at::equal(y_draws, fused_causal_attention(qkv, at::Tensor(), doc)));  // dropout did act
    }
  }
  const at::Tensor qkv = at::randn({B, T + 1, 3, H, D});
  CHECK_THROWS_WITH_AS(fused_causal_attention(qkv, draws), doctest::Contains("dropout draws for a block"),
                       std::exception);
}
