// fused_bias_gelu against at::gelu(x + bias, "tanh"): values and gradients (x and bias), over the
// whole range where the exp approximation clamps, with and without a bias; and the bf16 bit
// conversions it shares with the fused attention (vector_math.h) against at::BFloat16.
#include <cmath>
#include <cstdint>
#include <cstring>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "kernels/cpu/fused_gelu.h"
#include "kernels/cpu/vector_math.h"

#include "doctest_check.h"

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

TEST_CASE("fused gelu: bfloat16 storage is the float32 kernel on the widened inputs, rounded once") {
  // bf16 matmuls keep the MLP's activation in bf16: the kernel widens, computes in float32 and
  // rounds the output (and the saved derivative) to bf16.
  at::manual_seed(12);
  const at::Tensor x = (at::randn({7, 129}) * 3).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor bias = at::randn({129}).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor g = at::randn({7, 129}).to(at::kBFloat16);
  CHECK(fused_gelu_supports(x, bias));
  CHECK_FALSE(fused_gelu_supports(x, bias.detach().to(at::kFloat)));  // mixed dtypes: not this kernel
  const at::Tensor out = fused_bias_gelu(x, bias);
  CHECK((out.scalar_type() == at::kBFloat16));
  const at::Tensor x32 = x.detach().to(at::kFloat).requires_grad_(true);
  const at::Tensor b32 = bias.detach().to(at::kFloat).requires_grad_(true);
  const at::Tensor ref = fused_bias_gelu(x32, b32);
  const double bf16_ulp = 1.0 / 128;
  CHECK(at::allclose(out.to(at::kFloat), ref, bf16_ulp, 1e-6));
  CHECK_FALSE(at::equal(out.to(at::kFloat), ref));  // the output is rounded: bf16 storage in effect
  auto grads = torch::autograd::grad({out}, {x, bias}, {g});
  auto ref_grads = torch::autograd::grad({ref}, {x32, b32}, {g.to(at::kFloat)});
  CHECK((grads[0].scalar_type() == at::kBFloat16));
  CHECK(at::allclose(grads[0].to(at::kFloat), ref_grads[0], 2 * bf16_ulp, 1e-5));  // derivative and product rounded
  // The bias gradient sums 7 rounded rows: bounded by the sum of their magnitudes.
  const at::Tensor bound = (ref_grads[0].abs().sum(0) * 3 * bf16_ulp) + 1e-5;
  CHECK(((grads[1].to(at::kFloat) - ref_grads[1]).abs() <= bound).all().item<bool>());
}

TEST_CASE("fused gelu: bf16 rows wider than the kernel's chunk give the float32 kernel's values rounded, bit for bit") {
  // bf16 rows are computed a chunk of columns at a time; 1100 = two whole chunks and a tail, each
  // row and its bias must line up across the chunk boundaries.
  at::manual_seed(13);
  for (const bool with_bias : {false, true}) {
    CAPTURE(with_bias);
    const at::Tensor x = (at::randn({9, 1100}) * 3).to(at::kBFloat16);
    const at::Tensor bias = with_bias ? at::randn({1100}).to(at::kBFloat16) : at::Tensor();
    const at::Tensor out = fused_bias_gelu(x, bias);
    const at::Tensor ref = fused_bias_gelu(x.to(at::kFloat), with_bias ? bias.to(at::kFloat) : at::Tensor());
    CHECK(at::equal(out, ref.to(at::kBFloat16)));
    // The same rows shifted by one column land at other chunk offsets: still the same values.
    const at::Tensor shifted = fused_bias_gelu(x.narrow(1, 1, 1099).contiguous(),
                                               with_bias ? bias.narrow(0, 1, 1099).contiguous() : at::Tensor());
    CHECK(at::equal(shifted, out.narrow(1, 1, 1099)));
  }
}

TEST_CASE("vecmath: bf16 rounding is at::BFloat16's, a NaN included") {
  // Round to nearest even at ties, a carry into the exponent, infinities, and NaNs whose mantissa
  // would carry (0x7FFFFFFF rounded by the plain formula came out as -0).
  for (const uint32_t bits : {0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x7F7FFFFFu, 0x7F800000u, 0xFF800000u,
                              0x7FC00000u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7F800001u, 0x00000001u, 0x80000000u}) {
    CAPTURE(bits);
    float v;
    std::memcpy(&v, &bits, sizeof v);
    const c10::BFloat16 want(v);
    const uint16_t got = spmd::kernels::cpu::vecmath::float_to_bf16(v);
    if (std::isnan(v)) {
      CHECK(std::isnan(spmd::kernels::cpu::vecmath::bf16_to_float(got)));
    } else {
      CHECK(got == want.x);
    }
    const float widened = spmd::kernels::cpu::vecmath::bf16_to_float(want.x);
    if (!std::isnan(widened)) CHECK(widened == static_cast<float>(want));
  }
}
