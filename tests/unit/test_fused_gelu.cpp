// fused_bias_gelu against at::gelu(x + bias, "tanh"): values and gradients (x and bias), over the
// whole range where the exp approximation clamps, with and without a bias.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "kernels/cpu/fused_gelu.h"

// libtorch pulls in glog, whose CHECK would silently replace doctest's.
#undef CHECK
#include <doctest/doctest.h>

using namespace spmd::kernels::cpu;

TEST_CASE("fused gelu: values and gradients match at::gelu(x + bias, tanh)") {
  at::manual_seed(11);
  for (bool with_bias : {false, true}) {
    CAPTURE(with_bias);
    at::Tensor x = (at::randn({5, 37, 129}) * 3).requires_grad_(true);  // odd sizes: vector tails
    at::Tensor bias = with_bias ? at::randn({129}).requires_grad_(true) : at::Tensor();
    at::Tensor g = at::randn({5, 37, 129});
    at::Tensor ref = at::gelu(with_bias ? x + bias : x, "tanh");
    at::Tensor out = fused_bias_gelu(x, bias);
    CHECK(at::allclose(out, ref, 1e-5, 1e-6));
    std::vector<at::Tensor> inputs{x};
    if (with_bias) inputs.push_back(bias);
    auto ref_grads = torch::autograd::grad({ref}, inputs, {g});
    auto grads = torch::autograd::grad({out}, inputs, {g});
    CHECK(at::allclose(grads[0], ref_grads[0], 1e-5, 1e-5));
    if (with_bias) CHECK(at::allclose(grads[1], ref_grads[1], 1e-4, 1e-4));
    MESSAGE("max |dy| " << (out - ref).abs().max().item<float>() << ", max |dx| "
                        << (grads[0] - ref_grads[0]).abs().max().item<float>());
  }
}

TEST_CASE("fused gelu: extremes, zeros and a non-contiguous input") {
  at::Tensor x = at::tensor({-1e4f, -200.f, -60.f, -10.f, -1e-3f, 0.f, 1e-3f, 10.f, 60.f, 200.f, 1e4f}).requires_grad_(true);
  at::Tensor ref = at::gelu(x, "tanh");
  at::Tensor out = fused_bias_gelu(x);
  CHECK(at::isfinite(out).all().item<bool>());
  CHECK(at::allclose(out, ref, 1e-5, 1e-6));
  at::Tensor g = torch::autograd::grad({out.sum()}, {x})[0];
  at::Tensor g_ref = torch::autograd::grad({ref.sum()}, {x})[0];
  CHECK(at::allclose(g, g_ref, 1e-5, 1e-6));

  at::Tensor strided = at::randn({64, 48}).t();
  CHECK_FALSE(strided.is_contiguous());
  CHECK(at::allclose(fused_bias_gelu(strided), at::gelu(strided, "tanh"), 1e-5, 1e-6));
  CHECK_FALSE(fused_gelu_supports(strided.to(at::kDouble)));
}
