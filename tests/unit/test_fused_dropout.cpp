// Dropout by its draws (kernels::dropout, the CPU's fused_dropout): the values and gradient of
// x * draws.materialize() bit for bit, on any number of threads, for a block at an offset of a
// global array (a tensor-parallel or data-parallel rank's), and the generic path elsewhere.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include "kernels/cpu/fused_dropout.h"
#include "kernels/kernels.h"

#include "doctest_check.h"

using namespace spmd::kernels;

TEST_CASE("fused dropout: values and gradient of x times the materialized mask, bit for bit, on 1 and 2 threads, float32 and bf16") {
  const DropoutDraws draws({3, 7, 50}, {6, 7, 100}, {3, 0, 50}, 0x1234abcdull, 0.2);
  const at::Tensor mask = draws.materialize(at::kCPU);
  CHECK(mask.eq(0).any().item<bool>());
  CHECK(mask.eq(1.0f / 0.8f).any().item<bool>());
  at::manual_seed(3);
  const at::Tensor x = at::randn({3, 7, 50}).requires_grad_(true);
  const at::Tensor g = at::randn({3, 7, 50});
  const at::Tensor y_ref = x * mask;
  const at::Tensor gx_ref = torch::autograd::grad({y_ref}, {x}, {g})[0];
  const int threads = at::get_num_threads();
  for (int t : {1, 2}) {
    CAPTURE(t);
    at::set_num_threads(t);
    const at::Tensor y = cpu::fused_dropout(x, draws);
    CHECK(at::equal(y, y_ref));
    CHECK(at::equal(torch::autograd::grad({y}, {x}, {g})[0], gx_ref));
  }
  at::set_num_threads(threads);
  // bf16 x: float32 out and a bf16 gradient, as libtorch's promotion and autograd give them.
  const at::Tensor xb = at::randn({3, 7, 50}).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor yb_ref = xb * mask;
  const at::Tensor yb = cpu::fused_dropout(xb, draws);
  CHECK((yb.scalar_type() == at::kFloat));
  CHECK(at::equal(yb, yb_ref));
  const at::Tensor gb = torch::autograd::grad({yb}, {xb}, {g})[0];
  CHECK((gb.scalar_type() == at::kBFloat16));
  CHECK(at::equal(gb, torch::autograd::grad({yb_ref}, {xb}, {g})[0]));
  // A non-contiguous x: the same values.
  const at::Tensor xt = at::randn({3, 50, 7}).transpose(1, 2);
  CHECK(at::equal(cpu::fused_dropout(xt, draws), xt * mask));
}

TEST_CASE("fused dropout: the dispatcher takes the fused pass for float32 on the CPU, the generic product otherwise") {
  const DropoutDraws draws({4, 9}, {4, 9}, {0, 0}, 5, 0.5);
  const at::Tensor x = at::randn({4, 9});
  CHECK(cpu::fused_dropout_supports(x, draws));
  CHECK_FALSE(cpu::fused_dropout_supports(x.to(at::kDouble), draws));
  CHECK_FALSE(cpu::fused_dropout_supports(at::randn({4, 8}), draws));
  CHECK(at::equal(spmd::kernels::dropout(x, draws), x * draws.materialize(at::kCPU)));
  const at::Tensor wide = x.to(at::kDouble);
  CHECK(at::equal(spmd::kernels::dropout(wide, draws), wide * draws.materialize(at::kCPU)));
  CHECK(at::equal(spmd::kernels::dropout(x, DropoutDraws()), x));
  CHECK_THROWS_WITH_AS(cpu::fused_dropout(at::randn({4, 8}), draws), doctest::Contains("draws of its shape"),
                       std::exception);
}
