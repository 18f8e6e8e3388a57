// ParamCastCache: the bf16 copies of the weights are made once per optimizer update and carry the
// gradients of all their uses back to the float32 master weight.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "kernels/cpu/fused_adamw.h"
#include "kernels/kernels.h"
#include "optim/adamw.h"
#include "parallel/param_cast_cache.h"

#include "doctest_check.h"

using spmd::ParamCastCache;

TEST_CASE("param cast cache: one copy until the optimizer updates the weight, then a new one") {
  at::manual_seed(3);
  ParamCastCache cache;
  at::Tensor w = at::randn({8, 5}).requires_grad_(true);
  const at::Tensor a = cache.get(0, w, at::kBFloat16);
  CHECK((a.scalar_type() == at::kBFloat16));
  CHECK(at::equal(a.to(at::kFloat), w.detach().to(at::kBFloat16).to(at::kFloat)));
  CHECK(cache.get(0, w, at::kBFloat16).is_same(a));  // a second microbatch: no second cast
  CHECK(cache.get(0, w, at::kFloat).is_same(w));     // float32 operands: the weight itself

  // The optimizer's fused update writes through raw pointers; kernels::adamw_update bumps the
  // version as an in-place op would, so the next use casts the updated weight.
  at::Tensor m = at::zeros_like(w), v = at::zeros_like(w);
  {
    at::NoGradGuard no_grad;
    at::Tensor p = w.detach();  // shares the version counter, as the optimizer's tensors do
    spmd::kernels::AdamWScalars step;
    step.lr = 0.1;
    REQUIRE(spmd::kernels::cpu::fused_adamw_supports(p, at::ones_like(w), m, v));  // the raw-pointer path
    spmd::kernels::adamw_update(p, at::ones_like(w), m, v, step);
  }
  const at::Tensor b = cache.get(0, w, at::kBFloat16);
  CHECK_FALSE(b.is_same(a));
  CHECK(at::equal(b.to(at::kFloat), w.detach().to(at::kBFloat16).to(at::kFloat)));
  CHECK_FALSE(at::equal(a, b));

  // A copy made under no_grad carries no gradient: a training pass after it casts again.
  at::Tensor c;
  {
    at::NoGradGuard no_grad;
    c = cache.get(0, w, at::kBFloat16);
  }
  CHECK_FALSE(c.requires_grad());
  const at::Tensor d = cache.get(0, w, at::kBFloat16);
  CHECK(d.requires_grad());
  CHECK_FALSE(d.is_same(c));
}

TEST_CASE("param cast cache: the gradients of every use of one copy land, float32, in the master weight") {
  at::manual_seed(4);
  ParamCastCache cache;
  at::Tensor w = at::randn({6, 4}).requires_grad_(true);
  const at::Tensor x1 = at::randn({3, 6}), x2 = at::randn({5, 6});
  // Two microbatches, each its own backward through the shared copy (gradient accumulation).
  at::mm(x1.to(at::kBFloat16), cache.get(0, w, at::kBFloat16)).to(at::kFloat).sum().backward();
  at::mm(x2.to(at::kBFloat16), cache.get(0, w, at::kBFloat16)).to(at::kFloat).sum().backward();
  REQUIRE(w.grad().defined());
  CHECK((w.grad().scalar_type() == at::kFloat));
  // d/dw sum(x w) = x^T 1: the column sums of x, in each column (bf16 rounding of x only).
  const at::Tensor ones = at::ones({1, 4});
  const at::Tensor want = at::mm(x1.to(at::kBFloat16).to(at::kFloat).sum(0, true).t(), ones) +
                          at::mm(x2.to(at::kBFloat16).to(at::kFloat).sum(0, true).t(), ones);
  CHECK(at::allclose(w.grad(), want, 1e-2, 1e-2));
}

TEST_CASE("param cast cache: the on-device update (libtorch's fused AdamW, the GPU's) refreshes the bf16 copy") {
  // at::_fused_adamw_ writes the parameters without bumping their versions (torch 2.15); the
  // optimizer bumps them, else every later forward would keep the weights of the first cast.
  at::manual_seed(4);
  spmd::TrainConfig config;
  at::Tensor w = at::randn({16, 8}).requires_grad_(true);
  spmd::AdamW optimizer({w}, {true}, config);
  ParamCastCache cache;
  const at::Tensor before = cache.get(0, w, at::kBFloat16);
  const int64_t version = w._version();
  w.mutable_grad() = at::ones_like(w);
  optimizer.step_on_device(0.1, at::ones({}, at::kDouble), at::ones({}, at::kBool));
  CHECK(w._version() > version);
  const at::Tensor after = cache.get(0, w, at::kBFloat16);
  CHECK_FALSE(after.is_same(before));
  CHECK(at::equal(after.to(at::kFloat), w.detach().to(at::kBFloat16).to(at::kFloat)));
  CHECK_FALSE(at::equal(after, before));  // lr 0.1 moves every element past a bf16 rounding step
}
