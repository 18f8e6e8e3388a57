// Llama's fused CPU kernels against the unfused ops they replace: residual add + RMSNorm
// (fused_rms_norm.h) against x + delta and kernels::rms_norm; SwiGLU (fused_swiglu.h) against
// at::silu(gate) * up, and its [gate | up] form against it; the rotary pack (fused_rotary.h) on the
// packed q, k, v against apply_rope and cat, bit for bit in float32 (same operations, same order);
// grouped-query attention on the packed layout
// (fused_attention.h) against the (B, T, 3, H, D) kernel on the key/value heads repeated: the
// forward bit for bit (the same per-head work), the gradients to a stated tolerance (dK and dV sum
// the group's query heads inside the product instead of after it).
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "kernels/cpu/fused_attention.h"
#include "kernels/cpu/fused_rms_norm.h"
#include "kernels/cpu/fused_rotary.h"
#include "kernels/cpu/fused_swiglu.h"
#include "kernels/kernels.h"
#include "model/grouped_query.h"
#include "model/rope.h"

#include "doctest_check.h"

namespace {

using namespace spmd::kernels;

float llama_kernel_max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<float>();
}

// Angles (P, T, 1, D) of positions 0.. (P = 1) or shifted per row (P = B).
spmd::RopeAngles llama_kernel_angles(int64_t P, int64_t T, int64_t D) {
  const at::Tensor inv = at::pow(10000.0, -at::arange(0, D, 2, at::kFloat) / static_cast<double>(D));
  const at::Tensor positions = at::arange(T, at::kLong).unsqueeze(0) + at::arange(P, at::kLong).unsqueeze(1) * 3;
  return spmd::rope_angles(positions, inv);
}

}  // namespace

TEST_CASE("fused rms norm: sum, normed and every gradient match x + delta then kernels::rms_norm") {
  at::manual_seed(21);
  for (bool with_delta : {false, true}) {
    CAPTURE(with_delta);
    const at::Tensor x = (at::randn({3, 37, 129}) * 2).requires_grad_(true);  // odd sizes: vector tails, row chunks
    const at::Tensor delta = with_delta ? at::randn({3, 37, 129}).requires_grad_(true) : at::Tensor();
    const at::Tensor w = (at::rand({129}) + 0.5).requires_grad_(true);
    const at::Tensor d_norm = at::randn({3, 37, 129}), d_sum = at::randn({3, 37, 129});
    const at::Tensor sum_ref = with_delta ? x + delta : x * 1;
    const at::Tensor norm_ref = rms_norm(sum_ref, w, 1e-5);
    const auto out = cpu::fused_residual_rms_norm(x, delta, w, 1e-5, at::kFloat);
    CHECK(at::equal(out.sum, sum_ref));  // one rounding either way
    CHECK(at::allclose(out.normed, norm_ref, 1e-5, 1e-6));
    std::vector<at::Tensor> inputs{x, w};
    if (with_delta) inputs.push_back(delta);
    const auto ref = torch::autograd::grad({sum_ref, norm_ref}, inputs, {d_sum, d_norm});
    const auto got = torch::autograd::grad({out.sum, out.normed}, inputs, {d_sum, d_norm});
    for (size_t i = 0; i < ref.size(); ++i) {
      CAPTURE(i);
      CHECK(at::allclose(got[i], ref[i], 1e-4, 1e-5));
    }
    MESSAGE("max |d normed| " << llama_kernel_max_diff(out.normed, norm_ref) << ", max |dx| "
                              << llama_kernel_max_diff(got[0], ref[0]) << ", max |dw| " << llama_kernel_max_diff(got[1], ref[1]));
  }
}

TEST_CASE("fused rms norm: bf16 branch and output (bf16 products), and the same bits on 1 and 2 threads") {
  at::manual_seed(22);
  const at::Tensor x = at::randn({70, 96}).requires_grad_(true);
  const at::Tensor delta = at::randn({70, 96}).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor w = (at::rand({96}) + 0.5).requires_grad_(true);
  const at::Tensor sum_ref = x + delta;
  const at::Tensor norm_ref = rms_norm(sum_ref, w, 1e-5).to(at::kBFloat16);
  const auto out = cpu::fused_residual_rms_norm(x, delta, w, 1e-5, at::kBFloat16);
  CHECK((out.normed.scalar_type() == at::kBFloat16));
  CHECK(at::equal(out.sum, sum_ref));
  CHECK(llama_kernel_max_diff(out.normed, norm_ref) <= 0.02f);  // one bf16 ulp at |y| < 4
  const at::Tensor d_norm = at::randn({70, 96}).to(at::kBFloat16);
  const auto grads = [&] { return torch::autograd::grad({out.normed}, {x, delta, w}, {d_norm}, true); };
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = grads();
  at::set_num_threads(2);
  const auto two = grads();
  at::set_num_threads(threads);
  for (size_t i = 0; i < one.size(); ++i) CHECK(at::equal(one[i], two[i]));
  CHECK((one[1].scalar_type() == at::kBFloat16));
  const auto ref = torch::autograd::grad({norm_ref}, {x, delta, w}, {d_norm});
  CHECK(at::allclose(one[0], ref[0], 1e-2, 1e-2));
  CHECK(at::allclose(one[2], ref[2], 1e-2, 1e-2));
}

TEST_CASE("fused swiglu: values and gradients match at::silu(gate) * up, float32 and bf16") {
  at::manual_seed(23);
  const at::Tensor g32 = (at::randn({5, 37, 129}) * 4).requires_grad_(true);
  const at::Tensor u32 = at::randn({5, 37, 129}).requires_grad_(true);
  const at::Tensor dy = at::randn({5, 37, 129});
  const at::Tensor ref = at::silu(g32) * u32;
  const at::Tensor out = cpu::fused_swiglu(g32, u32);
  CHECK(at::allclose(out, ref, 1e-5, 1e-6));
  const auto r = torch::autograd::grad({ref}, {g32, u32}, {dy});
  const auto f = torch::autograd::grad({out}, {g32, u32}, {dy});
  CHECK(at::allclose(f[0], r[0], 1e-5, 1e-5));
  CHECK(at::allclose(f[1], r[1], 1e-5, 1e-6));
  MESSAGE("max |dy| " << llama_kernel_max_diff(out, ref) << ", max |d gate| " << llama_kernel_max_diff(f[0], r[0]));
  // bf16: the float32 kernel on the widened values, rounded once.
  const at::Tensor g16 = g32.detach().to(at::kBFloat16), u16 = u32.detach().to(at::kBFloat16);
  const at::Tensor out16 = cpu::fused_swiglu(g16, u16);
  CHECK((out16.scalar_type() == at::kBFloat16));
  CHECK(at::allclose(out16.to(at::kFloat), (at::silu(g16.to(at::kFloat)) * u16.to(at::kFloat)), 1e-2, 1e-2));
  CHECK_FALSE(cpu::fused_swiglu_supports(g32, u16));
}

TEST_CASE("fused rotary pack: apply_rope and cat bit for bit, forward and backward, float32 and bf16 values") {
  at::manual_seed(24);
  for (int64_t P : {1, 3}) {
    CAPTURE(P);
    const spmd::RopeAngles a = llama_kernel_angles(P, 19, 16);
    const at::Tensor qkv = at::randn({3, 19, 10, 16}).requires_grad_(true);  // 6 query, 2 key, 2 value heads
    const at::Tensor q = qkv.narrow(2, 0, 6), k = qkv.narrow(2, 6, 2), v = qkv.narrow(2, 8, 2);
    const at::Tensor ref = at::cat({spmd::apply_rope(q, a), spmd::apply_rope(k, a), v}, 2);
    const at::Tensor out = cpu::fused_rotary_pack(qkv, 2, a.cos, a.sin);
    CHECK(out.sizes() == at::IntArrayRef{3, 19, 10, 16});
    CHECK(at::equal(out, ref));
    const at::Tensor dy = at::randn({3, 19, 10, 16});
    CHECK(at::equal(torch::autograd::grad({out}, {qkv}, {dy})[0], torch::autograd::grad({ref}, {qkv}, {dy})[0]));
    // bf16 (bf16 products): the float32 rotation of their values, rounded once, as apply_rope.
    const at::Tensor q16 = qkv.detach().to(at::kBFloat16);
    CHECK(at::equal(cpu::fused_rotary_pack(q16, 2, a.cos, a.sin),
                    at::cat({spmd::apply_rope(q16.narrow(2, 0, 6), a), spmd::apply_rope(q16.narrow(2, 6, 2), a),
                             q16.narrow(2, 8, 2)},
                            2)));
  }
  // The device-generic path (rotary on each, then cat) gives the same numbers.
  const spmd::RopeAngles a = llama_kernel_angles(1, 7, 8);
  const at::Tensor qkv = at::randn({2, 7, 5, 8});  // 3 query heads, 1 key, 1 value
  use_cpu_kernels(CpuKernels::kGeneric);
  const at::Tensor generic = rotary_pack(qkv, 1, a.cos, a.sin);
  use_cpu_kernels(CpuKernels::kFused);
  CHECK(at::allclose(rotary_pack(qkv, 1, a.cos, a.sin), generic, 1e-6, 1e-7));
  CHECK_FALSE(cpu::fused_rotary_supports(qkv, 3, a.cos, a.sin));  // no query heads left
}

TEST_CASE("fused swiglu halves: [gate | up] read in place, the pair kernel's bits, the gradient in the same layout") {
  at::manual_seed(27);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype);
    const at::Tensor gate_up = (at::randn({4, 21, 2 * 65}) * 3).to(dtype).requires_grad_(true);
    const at::Tensor g = gate_up.detach().narrow(-1, 0, 65).contiguous().requires_grad_(true);
    const at::Tensor u = gate_up.detach().narrow(-1, 65, 65).contiguous().requires_grad_(true);
    const at::Tensor out = cpu::fused_swiglu_halves(gate_up), ref = cpu::fused_swiglu(g, u);
    CHECK(out.sizes() == at::IntArrayRef{4, 21, 65});
    CHECK(at::equal(out, ref));
    const at::Tensor dy = at::randn({4, 21, 65}).to(dtype);
    const at::Tensor d = torch::autograd::grad({out}, {gate_up}, {dy})[0];
    const auto r = torch::autograd::grad({ref}, {g, u}, {dy});
    CHECK(at::equal(d, at::cat({r[0], r[1]}, -1)));
  }
  // kernels::swiglu_halves off the fused path: the pair op on the two halves.
  const at::Tensor gate_up = at::randn({3, 10});
  use_cpu_kernels(CpuKernels::kGeneric);
  const at::Tensor generic = swiglu_halves(gate_up);
  use_cpu_kernels(CpuKernels::kFused);
  CHECK(at::allclose(swiglu_halves(gate_up), generic, 1e-5, 1e-6));
  CHECK(at::allclose(generic, at::silu(gate_up.narrow(-1, 0, 5)) * gate_up.narrow(-1, 5, 5), 1e-5, 1e-6));
  CHECK_FALSE(cpu::fused_swiglu_halves_supports(at::randn({3, 9})));
}

TEST_CASE("fused grouped attention: the repeated-heads kernel's output bit for bit, its gradients within 1e-5") {
  at::manual_seed(25);
  for (int64_t kv_heads : {1, 2, 6}) {  // groups of 6, 3 and 1 query heads
    CAPTURE(kv_heads);
    const int64_t B = 2, T = 45, H = 6, D = 16;
    const at::Tensor packed = at::randn({B, T, H + 2 * kv_heads, D}).requires_grad_(true);
    const at::Tensor q = packed.narrow(2, 0, H), k = packed.narrow(2, H, kv_heads),
                     v = packed.narrow(2, H + kv_heads, kv_heads);
    const at::Tensor qkv = at::stack({q, spmd::repeat_kv(k, H), spmd::repeat_kv(v, H)}, 2);
    const at::Tensor ref = cpu::fused_causal_attention(qkv);
    const at::Tensor out = cpu::fused_grouped_attention(packed, kv_heads, DropoutDraws());
    CHECK(at::equal(out, ref));
    const at::Tensor dy = at::randn({B, T, H, D});
    const at::Tensor g_ref = torch::autograd::grad({ref}, {packed}, {dy})[0];
    const at::Tensor g = torch::autograd::grad({out}, {packed}, {dy})[0];
    CHECK(at::allclose(g, g_ref, 1e-5, 1e-5));
    if (kv_heads == H) CHECK(at::equal(g, g_ref));  // groups of one: the same operations
    MESSAGE("max |d packed| " << llama_kernel_max_diff(g, g_ref));
  }
}

TEST_CASE("grouped attention dispatch: the fused path and the device-generic one agree, dropout and documents too") {
  at::manual_seed(26);
  const int64_t B = 2, T = 33, H = 4, Hkv = 2, D = 8;
  const at::Tensor packed = at::randn({B, T, H + 2 * Hkv, D}).requires_grad_(true);
  const at::Tensor starts = at::tensor({0, 0, 0, 0, 0, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 17, 17, 17, 17, 17, 17, 17, 17,
                                        17, 17, 17, 17, 17, 17, 17, 17}, at::kLong).expand({B, T}).contiguous();
  const DropoutDraws draws({B, H, T, T}, {B, H, T, T}, {0, 0, 0, 0}, 0x5eed, 0.25);
  const at::Tensor fused = grouped_causal_attention(packed, Hkv, draws, at::kFloat, starts);
  use_cpu_kernels(CpuKernels::kGeneric);
  const at::Tensor generic = grouped_causal_attention(packed, Hkv, draws, at::kFloat, starts);
  use_cpu_kernels(CpuKernels::kFused);
  CHECK(at::allclose(fused, generic, 1e-5, 1e-6));
  const at::Tensor dy = at::randn({B, T, H, D});
  CHECK(at::allclose(torch::autograd::grad({fused}, {packed}, {dy})[0],
                     torch::autograd::grad({generic}, {packed}, {dy})[0], 1e-4, 1e-5));
}
