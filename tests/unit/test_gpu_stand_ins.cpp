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
