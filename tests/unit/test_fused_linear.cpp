// fused_linear against at::mm / at::addmm: values and gradients of x, W and the bias, for row-major
// and transposed (tied-embedding) weights, on 1 and 2 threads, through sgemm_ and at::addmm_out;
// and cpu::parallel_gemm's row and column splits against at::mm.
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include "kernels/cpu/cpu_gemm.h"
#include "kernels/cpu/fused_linear.h"
#include "kernels/kernels.h"

#include "doctest_check.h"

using namespace spmd::kernels;
using namespace spmd::kernels::cpu;

namespace {

struct Threads {  // restores the intra-op thread count
  int saved = at::get_num_threads();
  explicit Threads(int n) { at::set_num_threads(n); }
  ~Threads() { at::set_num_threads(saved); }
};

void check_linear(int64_t M, int64_t K, int64_t N, bool transposed_weight, bool with_bias) {
  at::manual_seed(5);
  at::Tensor x = at::randn({M, K}).requires_grad_(true);
  at::Tensor stored = (transposed_weight ? at::randn({N, K}) : at::randn({K, N})).requires_grad_(true);
  at::Tensor bias = with_bias ? at::randn({N}).requires_grad_(true) : at::Tensor();
  at::Tensor g = at::randn({M, N});
  at::Tensor w = transposed_weight ? stored.t() : stored;  // (K, N)

  at::Tensor ref = with_bias ? at::addmm(bias, x, w) : at::mm(x, w);
  REQUIRE(fused_linear_supports(x, w));
  at::Tensor out = fused_linear(x, w, bias);
  CHECK(at::allclose(out, ref, 1e-5, 1e-5));

  std::vector<at::Tensor> inputs{x, stored};
  if (with_bias) inputs.push_back(bias);
  auto ref_grads = torch::autograd::grad({ref}, inputs, {g});
  auto grads = torch::autograd::grad({out}, inputs, {g});
  for (size_t i = 0; i < inputs.size(); ++i) {
    CAPTURE(i);
    CHECK(grads[i].sizes() == inputs[i].sizes());
    CHECK(at::allclose(grads[i], ref_grads[i], 1e-4, 1e-4));
  }
}

}  // namespace

TEST_CASE("fused linear: values and gradients match at::mm / at::addmm") {
  if (!cpu::has_blas_sgemm()) {
    MESSAGE("no process-wide sgemm_: fused_linear is not used on this build");
    CHECK_FALSE(fused_linear_supports(at::randn({4, 3}), at::randn({3, 2})));
    return;
  }
  // Shapes: small (one thread), tall (rows split), wide (columns split), odd sizes.
  for (int threads : {1, 2}) {
    Threads scope(threads);
    for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{3, 5, 7}, {768, 128, 384}, {64, 96, 1000}, {301, 77, 65}}) {
      for (bool transposed : {false, true})
        for (bool bias : {false, true}) {
          CAPTURE(threads);
          CAPTURE(M);
          CAPTURE(K);
          CAPTURE(N);
          CAPTURE(transposed);
          CAPTURE(bias);
          check_linear(M, K, N, transposed, bias);
        }
    }
  }
}

TEST_CASE("side by side linear: x times weights side by side matches at::mm on their cat, values and gradients") {
  if (!cpu::has_blas_sgemm()) {
    MESSAGE("no process-wide sgemm_: side_by_side_linear is not used on this build");
    CHECK_FALSE(side_by_side_linear_supports(at::randn({4, 3}), {at::randn({3, 2})}));
    return;
  }
  at::manual_seed(6);
  for (int threads : {1, 2}) {
    Threads scope(threads);
    CAPTURE(threads);
    const at::Tensor x = at::randn({301, 48}).requires_grad_(true);
    std::vector<at::Tensor> ws;
    for (int64_t n : {96, 32, 32}) ws.push_back((at::randn({48, n}) * 0.1).requires_grad_(true));
    const at::Tensor out = side_by_side_linear(x, ws);
    const at::Tensor ref = at::mm(x, at::cat(ws, 1));
    CHECK(out.sizes() == at::IntArrayRef{301, 160});
    CHECK(at::allclose(out, ref, 1e-5, 1e-5));
    const at::Tensor dy = at::randn({301, 160});
    std::vector<at::Tensor> inputs{x};
    inputs.insert(inputs.end(), ws.begin(), ws.end());
    const auto g = torch::autograd::grad({out}, inputs, {dy});
    const auto r = torch::autograd::grad({ref}, inputs, {dy});
    for (size_t i = 0; i < inputs.size(); ++i) {
      CAPTURE(i);
      CHECK(g[i].sizes() == r[i].sizes());
      CHECK(at::allclose(g[i], r[i], 1e-4, 1e-5));
    }
    // Only some inputs needing gradients: the others get none.
    const at::Tensor frozen = ws[1].detach();
    const at::Tensor partial = side_by_side_linear(x.detach(), {ws[0], frozen, ws[2]});
    const auto gp = torch::autograd::grad({partial}, {ws[0], ws[2]}, {dy});
    CHECK(at::allclose(gp[1], r[3], 1e-4, 1e-5));
  }
  // A column block of a wider gradient (an FSDP projection's share of a side-by-side output) is
  // read in place: the same dX and dW as from its contiguous copy.
  const at::Tensor xb = at::randn({301, 48}), wb = at::randn({48, 32}), wide = at::randn({301, 160});
  const LinearGrads in_place = fused_linear_backward(xb, wb, wide.narrow(1, 96, 32), true, true);
  const LinearGrads copied = fused_linear_backward(xb, wb, wide.narrow(1, 96, 32).contiguous(), true, true);
  CHECK(at::equal(in_place.dx, copied.dx));
  CHECK(at::equal(in_place.dw, copied.dw));
  CHECK_FALSE(side_by_side_linear_supports(at::randn({4, 6}), {at::randn({6, 3}), at::randn({5, 3})}));
  CHECK_FALSE(side_by_side_linear_supports(at::randn({4, 6}), {}));
  CHECK_FALSE(side_by_side_linear_supports(at::randn({4, 6}), std::vector<at::Tensor>(4, at::randn({6, 2}))));
  // side_by_side_product elsewhere (the generic path): the concatenated weight through dense_product.
  const at::Tensor xd = at::randn({5, 6}, at::kDouble);
  const std::vector<at::Tensor> wd{at::randn({6, 3}, at::kDouble), at::randn({6, 2}, at::kDouble)};
  CHECK(at::allclose(side_by_side_product(xd, wd), at::mm(xd, at::cat(wd, 1)), 1e-9, 1e-9));
}

TEST_CASE("fused linear: what it does not take") {
  at::manual_seed(5);  // libtorch seeds its default generator anew in every process
  at::Tensor x = at::randn({4, 6});
  CHECK_FALSE(fused_linear_supports(x.to(at::kDouble), at::randn({6, 3}, at::kDouble)));
  CHECK_FALSE(fused_linear_supports(x, at::randn({5, 3})));                // K mismatch
  CHECK_FALSE(fused_linear_supports(x, at::randn({6, 6, 2}).select(2, 0)));  // strided both ways
  // dense_product() hands those to libtorch instead (float32 operand dtype, its default, leaves
  // float64 operands as they are): the float64 product.
  at::Tensor xd = x.to(at::kDouble), wd = at::randn({6, 3}, at::kDouble), bd = at::randn({3}, at::kDouble);
  CHECK(at::allclose(dense_product(xd, wd, bd), at::addmm(bd, xd, wd), 1e-5, 1e-5));
  CHECK(at::allclose(dense_product(xd, wd), at::mm(xd, wd), 1e-5, 1e-5));
}

TEST_CASE("bfloat16 operands: dense_product and linear_forward/backward vs products of the rounded operands") {
  // The reference: float64 products of the operands (and bias) rounded to bfloat16, the result
  // rounded once more: autocast's semantics, the result stays bf16 (libtorch's bf16 addmm). Tolerance: two bf16 roundings of the result (2^-8 each)
  // relative to the sum of |terms|, which bounds the accumulation error too.
  at::manual_seed(11);
  const int64_t M = 48, K = 40, N = 24;
  auto rounded = [](const at::Tensor& t) { return t.detach().to(at::kBFloat16).to(at::kDouble); };
  auto close = [](const at::Tensor& got, const at::Tensor& want, const at::Tensor& scale) {
    return ((got.to(at::kDouble) - want).abs() <= scale * (2.0 / 256) + 1e-6).all().item<bool>();
  };
  for (bool transposed : {false, true}) {
    CAPTURE(transposed);
    at::Tensor x = at::randn({M, K}).requires_grad_(true);
    at::Tensor stored = (transposed ? at::randn({N, K}) : at::randn({K, N})).requires_grad_(true);
    at::Tensor bias = at::randn({N}).requires_grad_(true);
    at::Tensor w = transposed ? stored.t() : stored;
    at::Tensor dy = at::randn({M, N}).to(at::kBFloat16);  // the gradient of a bf16 output is bf16

    at::Tensor y = dense_product(x, w, bias, at::kBFloat16);
    CHECK((y.scalar_type() == at::kBFloat16));
    at::Tensor want = at::mm(rounded(x), rounded(w)) + rounded(bias);
    CHECK(close(y, want, at::mm(rounded(x).abs(), rounded(w).abs()) + bias.detach().abs().to(at::kDouble)));
    // And it is not the float32 product: bf16 rounding shows at this size.
    CHECK_FALSE(at::equal(y.to(at::kFloat), at::addmm(bias, x, w)));

    auto grads = torch::autograd::grad({y}, {x, stored, bias}, {dy});
    at::Tensor dx_want = at::mm(rounded(dy), rounded(w).t());
    at::Tensor dw_want = at::mm(rounded(x).t(), rounded(dy));
    CHECK(close(grads[0], dx_want, at::mm(rounded(dy).abs(), rounded(w).abs().t())));
    CHECK(close(transposed ? grads[1].t() : grads[1], dw_want, at::mm(rounded(x).abs().t(), rounded(dy).abs())));
    // The gradients land in the float32 parameters' dtype; the bias's is a sum of bf16 rows.
    CHECK((grads[0].scalar_type() == at::kFloat && grads[1].scalar_type() == at::kFloat));
    CHECK(close(grads[2], rounded(dy).sum(0), rounded(dy).abs().sum(0)));

    // The autograd-free pair used by the FSDP layers computes the same products.
    at::NoGradGuard no_grad;
    CHECK(at::equal(linear_forward(x, w, bias, at::kBFloat16), y.detach()));
    LinearGrads g = linear_backward(x, w, dy, true, true, true, at::kBFloat16);
    CHECK(at::equal(g.dx, grads[0]));
    CHECK(at::equal(transposed ? g.dw.t() : g.dw, grads[1]));
    CHECK(at::allclose(g.dbias, grads[2]));
  }
}

TEST_CASE("cpu::parallel_gemm: row and column splits, transposes, through sgemm_ and at::addmm_out") {
  Threads scope(2);
  at::manual_seed(9);
  for (bool force_aten : {false, true}) {
    cpu::detail::force_aten_gemm(force_aten);
    for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{200, 50, 40}, {40, 300, 50}, {1, 1, 1}}) {
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          CAPTURE(force_aten);
          CAPTURE(M);
          CAPTURE(N);
          CAPTURE(ta);
          CAPTURE(tb);
          at::Tensor a = ta ? at::randn({K, M}) : at::randn({M, K});
          at::Tensor b = tb ? at::randn({N, K}) : at::randn({K, N});
          at::Tensor c = at::randn({M, N});
          at::Tensor ref = 0.5 * c + 2.0 * at::mm(ta ? a.t() : a, tb ? b.t() : b);
          cpu::parallel_gemm(ta, tb, M, N, K, 2.f, a.data_ptr<float>(), a.size(1), b.data_ptr<float>(), b.size(1), 0.5f,
                             c.data_ptr<float>(), N);
          CHECK(at::allclose(c, ref, 1e-4, 1e-4));
        }
    }
  }
  cpu::detail::force_aten_gemm(false);
}
