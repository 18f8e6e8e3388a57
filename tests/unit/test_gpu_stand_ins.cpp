// The CPU stand-ins of the GPU-only calls (kernels/gpu_stand_ins.h) and the head's GPU entries in
// kernels.h, against the unfused libtorch computation: the same numbers, so that the GPU's code
// path run on a CPU (runtime.cpu_kernels: generic) computes what the GPU computes.
#include <cmath>

#include <ATen/ATen.h>

#include "kernels/kernels.h"

#include "doctest_check.h"

using namespace spmd;

TEST_CASE("gpu stand-ins: products with a float32 result from bf16 operands are float32 products of their values") {
  at::manual_seed(11);
  const at::Tensor x = at::randn({37, 24}).to(at::kBFloat16), w = at::randn({24, 53}).to(at::kBFloat16);
  const at::Tensor want = at::mm(x.to(at::kDouble), w.to(at::kDouble));
  const at::Tensor got = kernels::product_float_out(x, w);
  CHECK((got.scalar_type() == at::kFloat));
  CHECK(at::allclose(got.to(at::kDouble), want, 1e-6, 1e-5));
  // bf16's own product rounds each result to 8 bits: far coarser than the float32 result.
  CHECK_FALSE(at::allclose(at::mm(x, w).to(at::kDouble), want, 1e-6, 1e-5));

  // acc += alpha x^T dy into a (N, K) table's transpose, and into a (K, N) accumulator.
  const at::Tensor dy = at::randn({37, 53}).to(at::kBFloat16);
  const at::Tensor table = at::randn({53, 24});
  const at::Tensor acc = table.clone();
  kernels::add_product_float_out(acc.t(), x.t(), dy, 0.25);
  const at::Tensor expected = table.to(at::kDouble) + 0.25 * at::mm(dy.t().to(at::kDouble), x.to(at::kDouble));
  CHECK(at::allclose(acc.to(at::kDouble), expected, 1e-6, 1e-5));
  const at::Tensor acc2 = table.t().contiguous();
  kernels::add_product_float_out(acc2, x.t(), dy, 0.25);
  CHECK(at::allclose(acc2.to(at::kDouble), expected.t(), 1e-6, 1e-5));
}

TEST_CASE("gpu stand-ins: softmax cross-entropy equals log_softmax, gather and softmax - one_hot, padding excluded") {
  at::manual_seed(12);
  const int64_t n = 9, V = 40, valid = 35;
  const at::Tensor logits = at::randn({n, V}) * 3;
  at::Tensor targets = at::randint(0, valid, {n}, at::kLong);
  targets[4] = -1;  // a row that scores nothing
  const kernels::SoftmaxCrossEntropy got = kernels::softmax_cross_entropy(logits, targets, valid, true, at::kBFloat16);
  // The reference in double over the valid columns only.
  const at::Tensor z = logits.narrow(1, 0, valid).to(at::kDouble);
  const at::Tensor log_probs = at::log_softmax(z, 1);
  for (int64_t r = 0; r < n; ++r) {
    CAPTURE(r);
    const int64_t t = targets[r].item<int64_t>();
    const double want_loss = t >= 0 ? -log_probs[r][t].item<double>() : 0.0;
    CHECK(got.losses[r].item<double>() == doctest::Approx(want_loss).epsilon(1e-6));
  }
  at::Tensor want_grad = at::zeros({n, V}, at::kDouble);
  want_grad.narrow(1, 0, valid).copy_(log_probs.exp());
  for (int64_t r = 0; r < n; ++r)
    if (targets[r].item<int64_t>() >= 0) want_grad[r][targets[r].item<int64_t>()] -= 1.0;
  CHECK((got.grad.scalar_type() == at::kBFloat16));
  // Rounded once to bf16: each element within half a bf16 step (2^-9 relative) of the exact value.
  CHECK(at::allclose(got.grad.to(at::kDouble), want_grad, 1.0 / 256, 1e-7));
  CHECK(at::equal(got.grad.narrow(1, valid, V - valid), at::zeros({n, V - valid}, at::kBFloat16)));
  // Without the gradient: the same losses.
  const kernels::SoftmaxCrossEntropy loss_only = kernels::softmax_cross_entropy(logits, targets, valid, false, at::kBFloat16);
  CHECK_FALSE(loss_only.grad.defined());
  CHECK(at::equal(loss_only.losses, got.losses));
}

namespace {
// The residual add then the norm, op by op as the CPU's path computes them, in double.
struct Unfused {
  at::Tensor sum, normed;
};
Unfused unfused_residual_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& w, const at::Tensor& b,
                              bool rms) {
  const at::Tensor sum = x + delta.to(x.scalar_type());
  if (rms) return {sum, sum * at::rsqrt(sum.square().mean(-1, true) + 1e-5) * w};
  return {sum, at::layer_norm(sum, {sum.size(-1)}, w, b, 1e-5)};
}
}  // namespace

TEST_CASE("gpu stand-ins: the residual add + LayerNorm / RMSNorm op equals x + delta then the norm, values and gradients") {
  at::manual_seed(14);
  for (const bool rms : {false, true}) {
    for (const at::ScalarType delta_dtype : {at::kFloat, at::kBFloat16}) {
      CAPTURE(rms);
      CAPTURE(delta_dtype);
      const at::Tensor x0 = at::randn({3, 5, 48}), delta0 = at::randn({3, 5, 48}).to(delta_dtype);
      const at::Tensor w0 = at::randn({48}), b0 = rms ? at::Tensor() : at::randn({48});
      const at::Tensor d_sum = at::randn({3, 5, 48}), d_normed = at::randn({3, 5, 48});
      // Ours, float32 out (so that the comparison sees the float32 numbers), then bf16 out.
      at::Tensor x = x0.clone().requires_grad_(true), delta = delta0.clone().requires_grad_(true);
      at::Tensor w = w0.clone().requires_grad_(true), b = rms ? at::Tensor() : b0.clone().requires_grad_(true);
      const auto got = kernels::residual_norm(x, delta, w, b, 1e-5, rms, at::kFloat);
      (got.sum * d_sum + got.normed * d_normed).sum().backward();
      // The reference in double.
      at::Tensor xr = x0.to(at::kDouble).requires_grad_(true), dr = delta0.to(at::kDouble).requires_grad_(true);
      at::Tensor wr = w0.to(at::kDouble).requires_grad_(true);
      at::Tensor br = rms ? at::Tensor() : b0.to(at::kDouble).requires_grad_(true);
      const Unfused want = unfused_residual_norm(xr, dr, wr, br, rms);
      (want.sum * d_sum.to(at::kDouble) + want.normed * d_normed.to(at::kDouble)).sum().backward();
      CHECK(at::allclose(got.sum.to(at::kDouble), want.sum, 1e-6, 1e-6));
      CHECK(at::allclose(got.normed.to(at::kDouble), want.normed, 1e-5, 1e-5));
      CHECK(at::allclose(x.grad().to(at::kDouble), xr.grad(), 1e-5, 1e-5));
      CHECK((delta.grad().scalar_type() == delta_dtype));
      const double delta_tol = delta_dtype == at::kFloat ? 1e-5 : 1.0 / 128;
      CHECK(at::allclose(delta.grad().to(at::kDouble), dr.grad(), delta_tol, delta_tol));
      CHECK(at::allclose(w.grad().to(at::kDouble), wr.grad(), 1e-5, 1e-5));
      if (!rms) CHECK(at::allclose(b.grad().to(at::kDouble), br.grad(), 1e-5, 1e-5));
      // The bf16 output is the float32 one rounded once.
      const auto bf16 = kernels::residual_norm(x0, delta0, w0, b0, 1e-5, rms, at::kBFloat16);
      CHECK(at::equal(bf16.normed, got.normed.detach().to(at::kBFloat16)));
    }
  }
}

TEST_CASE("gpu stand-ins: the norm without a delta passes x through, and its gradient joins the residual's") {
  at::manual_seed(16);
  for (const bool rms : {false, true}) {
    CAPTURE(rms);
    const at::Tensor x0 = at::randn({6, 40}), w0 = at::randn({40}), b0 = rms ? at::Tensor() : at::randn({40});
    const at::Tensor d_sum = at::randn({6, 40}), d_normed = at::randn({6, 40});
    at::Tensor x = x0.clone().requires_grad_(true);
    const auto got = kernels::residual_norm(x, at::Tensor(), w0, b0, 1e-5, rms, at::kFloat);
    CHECK(got.sum.data_ptr() == x.data_ptr());  // x itself, no copy
    (got.sum * d_sum + got.normed * d_normed).sum().backward();
    at::Tensor xr = x0.to(at::kDouble).requires_grad_(true);
    const at::Tensor bd = rms ? at::Tensor() : b0.to(at::kDouble);
    const Unfused want = unfused_residual_norm(xr, at::zeros_like(xr), w0.to(at::kDouble), bd, rms);
    (want.sum * d_sum.to(at::kDouble) + want.normed * d_normed.to(at::kDouble)).sum().backward();
    CHECK(at::allclose(got.normed.to(at::kDouble), want.normed, 1e-5, 1e-5));
    CHECK(at::allclose(x.grad().to(at::kDouble), xr.grad(), 1e-5, 1e-5));
  }
}

TEST_CASE("gpu stand-ins: rotary embeddings equal the float32 rotation rounded once, and the backward rotates back") {
  at::manual_seed(17);
  const int64_t B = 2, T = 5, H = 3, D = 8;
  const at::Tensor x0 = at::randn({B, T, H, D}).to(at::kBFloat16);
  const at::Tensor angles = at::rand({B, T, 1, D / 2}) * 6;
  const at::Tensor full = at::cat({angles, angles}, -1);
  const at::Tensor cos = full.cos(), sin = full.sin();
  at::Tensor x = x0.clone().requires_grad_(true);
  const at::Tensor y = kernels::rotary(x, cos, sin);
  CHECK((y.scalar_type() == at::kBFloat16));
  // The reference: pairs (i, i + D/2) rotated by their angle, in double.
  const at::Tensor xd = x0.to(at::kDouble), cd = cos.to(at::kDouble), sd = sin.to(at::kDouble);
  const at::Tensor lo = xd.narrow(-1, 0, D / 2), hi = xd.narrow(-1, D / 2, D / 2);
  const at::Tensor c = cd.narrow(-1, 0, D / 2), s = sd.narrow(-1, 0, D / 2);
  const at::Tensor want = at::cat({lo * c - hi * s, hi * c + lo * s}, -1);
  CHECK(at::allclose(y.to(at::kDouble), want, 1.0 / 128, 1e-6));
  // A rotation's gradient is the inverse rotation of the output gradient: rotating y's gradient
  // back must give x's gradient, and an orthogonal map keeps the norm.
  const at::Tensor dy = at::randn({B, T, H, D}).to(at::kBFloat16);
  y.backward(dy);
  const at::Tensor dyd = dy.to(at::kDouble), dlo = dyd.narrow(-1, 0, D / 2), dhi = dyd.narrow(-1, D / 2, D / 2);
  const at::Tensor want_dx = at::cat({dlo * c + dhi * s, dhi * c - dlo * s}, -1);
  CHECK(at::allclose(x.grad().to(at::kDouble), want_dx, 1.0 / 128, 1e-6));
}

TEST_CASE("gpu stand-ins: SwiGLU on the generic path equals silu(gate) * up and its autograd gradients") {
  at::manual_seed(18);
  const at::Tensor g0 = at::randn({7, 33}) * 3, u0 = at::randn({7, 33}), dy = at::randn({7, 33});
  kernels::use_cpu_kernels(CpuKernels::kGeneric);
  at::Tensor g = g0.clone().requires_grad_(true), u = u0.clone().requires_grad_(true);
  const at::Tensor y = kernels::swiglu(g, u);
  y.backward(dy);
  kernels::use_cpu_kernels(CpuKernels::kFused);
  at::Tensor gr = g0.to(at::kDouble).requires_grad_(true), ur = u0.to(at::kDouble).requires_grad_(true);
  const at::Tensor want = at::silu(gr) * ur;
  want.backward(dy.to(at::kDouble));
  CHECK(y.grad_fn()->name().find("SwiGlu") != std::string::npos);  // the op of its own, not silu and mul
  CHECK(at::allclose(y.to(at::kDouble), want, 1e-6, 1e-6));
  CHECK(at::allclose(g.grad().to(at::kDouble), gr.grad(), 1e-5, 1e-6));
  CHECK(at::allclose(u.grad().to(at::kDouble), ur.grad(), 1e-5, 1e-6));
}
