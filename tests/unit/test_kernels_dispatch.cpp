// kernels/kernels.h on CPU: each entry against the plain libtorch computation, (a) where it picks
// the fused CPU kernel (float32; checked to be that kernel's result) and (b) where it must take
// the device-generic path (float64, or operands the fused kernel does not take).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>

#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/cpu/fused_adamw.h"
#include "kernels/cpu/fused_attention.h"
#include "kernels/cpu/fused_gelu.h"
#include "kernels/cpu/fused_linear.h"
#include "kernels/cpu/sum_of_squares.h"
#include "kernels/kernels.h"

#include "reference_attention.h"

#include "doctest_check.h"

using namespace spmd;

namespace {

using spmd::test::reference_attention;

// Values and qkv gradients of kernels::causal_attention against the reference.
void check_attention(at::ScalarType dtype, bool with_mask, double rtol, double atol) {
  at::manual_seed(21);
  const int64_t B = 2, T = 37, H = 3, D = 8;
  at::Tensor qkv = at::randn({B, T, 3, H, D}, dtype).mul_(2.0).requires_grad_(true);
  at::Tensor mask = with_mask ? (at::rand({B, H, T, T}) > 0.2).to(dtype) / 0.8 : at::Tensor();
  at::Tensor grad_out = at::randn({B, T, H, D}, dtype);
  at::Tensor y_ref = reference_attention(qkv, mask);
  at::Tensor g_ref = torch::autograd::grad({y_ref}, {qkv}, {grad_out})[0];
  at::Tensor y = kernels::causal_attention(qkv, mask);
  at::Tensor g = torch::autograd::grad({y}, {qkv}, {grad_out})[0];
  CHECK(y.sizes() == y_ref.sizes());
  CHECK((y.scalar_type() == dtype));
  CHECK(at::allclose(y, y_ref, rtol, atol));
  CHECK(at::allclose(g, g_ref, rtol * 10, atol));
}

// The op-by-op AdamW update kernels::adamw_update documents.
void reference_adamw(at::Tensor& p, const at::Tensor& g_in, at::Tensor& m, at::Tensor& v, const kernels::AdamWScalars& s) {
  const at::Tensor g = g_in * s.grad_scale;
  p.mul_(1.0 - s.lr * s.weight_decay);
  m.mul_(s.beta1).add_(g, 1.0 - s.beta1);
  v.mul_(s.beta2).addcmul_(g, g, 1.0 - s.beta2);
  p.addcdiv_(m, (v / s.bias2).sqrt_().add_(s.eps), -s.lr / s.bias1);
}

kernels::AdamWScalars adamw_scalars() {
  kernels::AdamWScalars s;
  s.lr = 3e-3;
  s.weight_decay = 0.1;
  s.beta1 = 0.9;
  s.beta2 = 0.95;
  s.eps = 1e-8;
  s.bias1 = 1.0 - std::pow(0.9, 3.0);
  s.bias2 = 1.0 - std::pow(0.95, 3.0);
  s.grad_scale = 0.5;
  return s;
}

}  // namespace

TEST_CASE("kernels::dense_product and linear_forward/backward: fused float32 and generic float64") {
  at::manual_seed(4);
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    CAPTURE(dtype);
    const bool fused = dtype == at::kFloat && kernels::cpu::has_blas_sgemm();
    at::Tensor x = at::randn({33, 20}, dtype).requires_grad_(true);
    at::Tensor w = at::randn({20, 17}, dtype).requires_grad_(true);
    at::Tensor b = at::randn({17}, dtype).requires_grad_(true);
    at::Tensor dy = at::randn({33, 17}, dtype);
    at::Tensor ref = at::addmm(b, x, w);
    at::Tensor y = kernels::dense_product(x, w, b, dtype);
    CHECK(at::allclose(y, ref, 1e-5, 1e-5));
    if (fused) CHECK(at::equal(y, kernels::cpu::fused_linear(x, w, b)));
    if (dtype == at::kDouble) CHECK(at::equal(y, ref));  // the libtorch ops themselves
    auto want = torch::autograd::grad({ref}, {x, w, b}, {dy});
    auto got = torch::autograd::grad({y}, {x, w, b}, {dy});
    for (size_t i = 0; i < got.size(); ++i) CHECK(at::allclose(got[i], want[i], 1e-4, 1e-5));

    at::NoGradGuard no_grad;
    CHECK(at::allclose(kernels::linear_forward(x, w, b, dtype), ref, 1e-5, 1e-5));
    kernels::LinearGrads g = kernels::linear_backward(x, w, dy, true, true, true, dtype);
    CHECK(at::allclose(g.dx, want[0], 1e-4, 1e-5));
    CHECK(at::allclose(g.dw, want[1], 1e-4, 1e-5));
    CHECK(at::allclose(g.dbias, want[2], 1e-4, 1e-5));
    CHECK_FALSE(kernels::linear_backward(x, w, dy, false, true, false, dtype).dx.defined());
  }
  CHECK((kernels::matmul_operand_dtype(MatmulDtype::kBFloat16) == at::kBFloat16));
  CHECK((kernels::matmul_operand_dtype(MatmulDtype::kFloat32) == at::kFloat));
}

TEST_CASE("kernels::matmul_operand_dtype: bf16 on a CPU only where its bf16 products are faster, and the runtime line says which") {
  // Read /proc/cpuinfo here independently of cpu_features.cpp: any line listing a flag.
  std::ifstream in("/proc/cpuinfo");
  const std::string info((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const bool amx = info.find(" amx_bf16") != std::string::npos;
  const bool has = amx || info.find(" avx512_bf16") != std::string::npos;
  const bool intel = info.find("GenuineIntel") != std::string::npos;
  const bool faster = amx || (has && !intel);  // AVX512_BF16 alone on an Intel core: half the fp32 rate
  CHECK(kernels::cpu::has_bf16_instructions() == has);
  const at::ScalarType on_cpu = kernels::matmul_operand_dtype(MatmulDtype::kBFloat16, c10::Device(c10::kCPU));
  CHECK((on_cpu == (faster ? at::kBFloat16 : at::kFloat)));
  CHECK((kernels::matmul_operand_dtype(MatmulDtype::kFloat32, c10::Device(c10::kCPU)) == at::kFloat));
  CHECK((kernels::matmul_operand_dtype(MatmulDtype::kBFloat16, c10::Device(c10::kCUDA, 0)) == at::kBFloat16));
  const std::string note = kernels::matmul_dtype_note(MatmulDtype::kBFloat16, c10::Device(c10::kCPU));
  MESSAGE(note);
  const std::string expected = faster ? std::string("matmuls bfloat16 (CPU has ") + (amx ? "amx_bf16)" : "avx512_bf16)")
                               : has  ? "has avx512_bf16 without amx_bf16"
                                      : "lacks bf16 instructions";
  CHECK(note.find(expected) != std::string::npos);
  CHECK(kernels::matmul_dtype_note(MatmulDtype::kFloat32, c10::Device(c10::kCPU)) == "matmuls float32");
}

TEST_CASE("kernels::accumulate_weight_grad: dw += x^T dy in both layouts, fused float32, generic float64, bf16") {
  at::manual_seed(6);
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    for (bool transposed : {false, true}) {  // dw (K, N) row-major, or the transpose of a row-major (N, K)
      CAPTURE(dtype);
      CAPTURE(transposed);
      at::Tensor x = at::randn({33, 20}, dtype), dy = at::randn({33, 17}, dtype);
      at::Tensor start = at::randn({20, 17}, dtype);
      at::Tensor dw = transposed ? start.t().contiguous().t() : start.clone();
      // Two calls over the rows' two halves sum to the whole product.
      kernels::accumulate_weight_grad(dw, x.narrow(0, 0, 16), dy.narrow(0, 0, 16), dtype);
      kernels::accumulate_weight_grad(dw, x.narrow(0, 16, 17), dy.narrow(0, 16, 17), dtype);
      CHECK(dw.is_contiguous() != transposed);  // written in place, in its own layout
      CHECK(at::allclose(dw, start + at::mm(x.t(), dy), 1e-5, 1e-5));
    }
  }
  // bf16 operands, in either layout of dw, over two calls. The sums each path makes: MKL's bf16
  // GEMM, the product of the rounded operands accumulated in float32 (as float64 computes it, to
  // float32 rounding); ATen's, each call's product rounded to bf16, then added in float32.
  const auto sum_of_two_calls = [](const std::function<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& call,
                                   bool transposed, bool rounded_products) {
    const at::Tensor x = at::randn({33, 20}).to(at::kBFloat16), dy = at::randn({33, 17}).to(at::kBFloat16);
    const at::Tensor start = at::randn({20, 17});
    at::Tensor dw = transposed ? start.t().contiguous().t() : start.clone();
    const at::Tensor x1 = x.narrow(0, 0, 16), x2 = x.narrow(0, 16, 17), dy1 = dy.narrow(0, 0, 16),
                     dy2 = dy.narrow(0, 16, 17);
    call(dw, x1, dy1);
    call(dw, x2, dy2);
    const auto product = [&](const at::Tensor& a, const at::Tensor& b) {
      return rounded_products ? at::mm(a.t(), b).to(at::kDouble) : at::mm(a.to(at::kDouble).t(), b.to(at::kDouble));
    };
    const at::Tensor want = (start.to(at::kDouble) + product(x1, dy1) + product(x2, dy2)).to(at::kFloat);
    CHECK((dw.scalar_type() == at::kFloat));
    CHECK(dw.is_contiguous() != transposed);
    CHECK(at::allclose(dw, want, 1e-6, 1e-5));
  };
  const bool loaded = kernels::cpu::mkl_bf16_gemm_loaded(), used = kernels::cpu::has_bf16_gemm();
  // Used on Intel CPUs only: on AMD MKL runs it at float32 speed (bench/bf16_weight_grad.py).
  CHECK(used == (loaded && kernels::cpu::cpu_vendor() == "GenuineIntel"));
  MESSAGE("MKL's bf16 GEMM " << std::string(!loaded ? "absent" : used ? "found and used" : "found, not used on this CPU"));
  for (bool transposed : {false, true}) {
    CAPTURE(transposed);
    if (loaded)  // its sums on any CPU that has it, whether or not this one uses it
      sum_of_two_calls(kernels::cpu::bf16_accumulate_weight_grad, transposed, false);
    for (bool force_aten : {false, true}) {
      CAPTURE(force_aten);
      kernels::cpu::detail::force_aten_gemm(force_aten);
      CHECK(kernels::cpu::has_bf16_gemm() == (used && !force_aten));
      const auto through_dispatch = [](const at::Tensor& dw, const at::Tensor& x, const at::Tensor& dy) {
        kernels::accumulate_weight_grad(dw, x, dy, at::kBFloat16);
      };
      sum_of_two_calls(through_dispatch, transposed, /*rounded_products=*/force_aten || !used);
    }
  }
  kernels::cpu::detail::force_aten_gemm(false);
}

TEST_CASE("kernels::causal_attention: fused float32 and generic float64, with and without a dropout mask") {
  for (bool with_mask : {false, true}) {
    CAPTURE(with_mask);
    check_attention(at::kFloat, with_mask, 1e-5, 1e-5);
    check_attention(at::kDouble, with_mask, 1e-10, 1e-12);
  }
  // float32 on CPU is the fused kernel itself; float64 is not.
  at::Tensor qkv = at::randn({2, 9, 3, 2, 8});
  at::Tensor mask = (at::rand({2, 2, 9, 9}) > 0.5).to(at::kFloat) * 2.0;
  CHECK(at::equal(kernels::causal_attention(qkv, mask), kernels::cpu::fused_causal_attention(qkv, mask)));
  CHECK(at::equal(kernels::causal_attention(qkv), kernels::cpu::fused_causal_attention(qkv)));
  CHECK_FALSE(kernels::cpu::fused_attention_supports(qkv.to(at::kDouble), mask.to(at::kDouble)));
  CHECK_FALSE(kernels::cpu::fused_attention_supports(qkv, mask.to(at::kDouble)));
}

TEST_CASE("kernels::causal_attention: dropout as its draws takes each path with the materialized mask's bits") {
  // float32 on the CPU: the fused kernel drawing the mask itself; float64: the generic path, handed
  // the mask materialized on qkv's device; bf16 operands from float32 qkv: the fused kernel on bf16.
  const kernels::DropoutDraws draws({2, 2, 9, 9}, {2, 4, 9, 9}, {0, 2, 0, 0}, 77, 0.25);
  const at::Tensor mask = draws.materialize(at::kCPU);
  const at::Tensor qkv = at::randn({2, 9, 3, 2, 8});
  CHECK(at::equal(kernels::causal_attention(qkv, draws, at::kFloat), kernels::causal_attention(qkv, mask)));
  const at::Tensor wide = qkv.to(at::kDouble);
  CHECK(at::equal(kernels::causal_attention(wide, draws, at::kDouble), kernels::causal_attention(wide, mask, at::kDouble)));
  CHECK(at::equal(kernels::causal_attention(qkv, draws, at::kBFloat16), kernels::causal_attention(qkv, mask, at::kBFloat16)));
  CHECK(at::equal(kernels::causal_attention(qkv, kernels::DropoutDraws(), at::kFloat), kernels::causal_attention(qkv)));
}

TEST_CASE("kernels::causal_attention: bfloat16 operands (model.matmul_dtype) within bf16 tolerance, bf16 out") {
  at::manual_seed(5);
  const int64_t B = 2, T = 33, H = 2, D = 16;
  const at::Tensor qkv = at::randn({B, T, 3, H, D}).requires_grad_(true);
  const at::Tensor grad_out = at::randn({B, T, H, D});
  for (bool with_mask : {false, true}) {
    CAPTURE(with_mask);
    const at::Tensor mask = with_mask ? (at::rand({B, H, T, T}) > 0.1).to(at::kFloat) / 0.9 : at::Tensor();
    const at::Tensor y_ref = test::reference_attention(qkv.to(at::kDouble), with_mask ? mask.to(at::kDouble) : mask);
    const at::Tensor g_ref = torch::autograd::grad({y_ref}, {qkv}, {grad_out.to(at::kDouble)})[0];
    const at::Tensor y = kernels::causal_attention(qkv, mask, at::kBFloat16);
    const at::Tensor g = torch::autograd::grad({y}, {qkv}, {grad_out})[0];
    CHECK((y.scalar_type() == at::kBFloat16));  // autocast's semantics: stays bf16 for the projection
    CHECK((g.scalar_type() == at::kFloat));     // back in qkv's dtype
    // bf16 keeps 8 significant bits: errors of a few 1e-3 relative to the outputs' scale (~1).
    const double y_err = (y.to(at::kDouble) - y_ref).abs().max().item<double>();
    const double g_err = (g.to(at::kDouble) - g_ref).abs().max().item<double>() / g_ref.abs().max().item<double>();
    MESSAGE("bf16 attention: max |y - y_ref| " << y_err << ", max |g - g_ref| / max |g_ref| " << g_err);
    CHECK(y_err < 5e-2);
    CHECK(g_err < 5e-2);
    // bf16 is in effect: the float32 kernel is much closer to the reference.
    const double y_err_fp32 = (kernels::causal_attention(qkv, mask).to(at::kDouble) - y_ref).abs().max().item<double>();
    CHECK(y_err > 10 * y_err_fp32);
    // On the CPU it is the fused kernel: bit for bit the float32 kernel on the bf16 values, rounded
    // to bf16 (libtorch's bf16 flash kernel was slower there), and so is its gradient.
    const at::Tensor rounded = qkv.detach().to(at::kBFloat16).to(at::kFloat).requires_grad_(true);
    const at::Tensor y_fused = kernels::cpu::fused_causal_attention(rounded, mask);
    CHECK(at::equal(y, y_fused.to(at::kBFloat16)));
    const at::Tensor g_fused = torch::autograd::grad({y_fused}, {rounded}, {grad_out.to(at::kBFloat16).to(at::kFloat)})[0];
    CHECK(at::equal(g, g_fused.to(at::kBFloat16).to(at::kFloat)));
  }
}

TEST_CASE("kernels::bias_gelu: fused float32 and generic float64 / mixed-dtype bias") {
  at::manual_seed(8);
  at::Tensor h = (at::randn({4, 11, 24}) * 3).requires_grad_(true);
  at::Tensor bias = at::randn({24}).requires_grad_(true);
  at::Tensor ref = at::gelu(h + bias, "tanh");
  at::Tensor y = kernels::bias_gelu(h, bias);
  CHECK(at::allclose(y, ref, 1e-5, 1e-6));
  CHECK(at::equal(y, kernels::cpu::fused_bias_gelu(h, bias)));
  at::Tensor dy = at::randn_like(ref);
  auto want = torch::autograd::grad({ref}, {h, bias}, {dy});
  auto got = torch::autograd::grad({y}, {h, bias}, {dy});
  CHECK(at::allclose(got[0], want[0], 1e-5, 1e-5));
  CHECK(at::allclose(got[1], want[1], 1e-4, 1e-4));
  CHECK(at::allclose(kernels::bias_gelu(h), at::gelu(h, "tanh"), 1e-5, 1e-6));

  // Not fused: the libtorch computation exactly.
  at::Tensor hd = h.detach().to(at::kDouble), bd = bias.detach().to(at::kDouble);
  CHECK(at::equal(kernels::bias_gelu(hd, bd), at::gelu(hd + bd, "tanh")));
  CHECK(at::equal(kernels::bias_gelu(hd), at::gelu(hd, "tanh")));
  CHECK(at::equal(kernels::bias_gelu(h.detach(), bd), at::gelu(h.detach() + bd, "tanh")));
}

TEST_CASE("kernels::adamw_update: fused float32 and op-by-op for float64 and strided tensors") {
  at::manual_seed(13);
  const kernels::AdamWScalars s = adamw_scalars();
  for (int variant = 0; variant < 3; ++variant) {  // 0: float32 fused, 1: float64, 2: float32 transposed
    CAPTURE(variant);
    const at::ScalarType dtype = variant == 1 ? at::kDouble : at::kFloat;
    auto make = [&](double scale) {
      at::Tensor t = at::randn({24, 40}, dtype) * scale;
      return variant == 2 ? t.t() : t;  // a non-contiguous view: not fusable
    };
    at::Tensor p = make(1.0), g = make(0.1), m = make(0.01), v = make(0.01).abs();
    at::Tensor p_ref = p.clone(), m_ref = m.clone(), v_ref = v.clone();
    CHECK(kernels::cpu::fused_adamw_supports(p, g, m, v) == (variant == 0));
    at::NoGradGuard no_grad;
    kernels::adamw_update(p, g, m, v, s);
    reference_adamw(p_ref, g, m_ref, v_ref, s);
    if (variant == 0) {  // float rounding of the scalars and fused order: close, not equal
      CHECK(at::allclose(p, p_ref, 1e-6, 1e-7));
      CHECK(at::allclose(m, m_ref, 1e-6, 1e-8));
      CHECK(at::allclose(v, v_ref, 1e-6, 1e-9));
    } else {
      CHECK(at::equal(p, p_ref));
      CHECK(at::equal(m, m_ref));
      CHECK(at::equal(v, v_ref));
    }
  }
}

TEST_CASE("kernels::sum_of_squares: a 0-dim float64 tensor, fused and generic") {
  at::manual_seed(17);
  at::Tensor t = at::randn({300, 129});
  for (const at::Tensor& x : {t, t.t(), t.to(at::kDouble), t.to(at::kBFloat16).to(at::kFloat)}) {
    at::Tensor got = kernels::sum_of_squares(x);
    CHECK(got.dim() == 0);
    CHECK((got.scalar_type() == at::kDouble));
    CHECK(got.device().is_cpu());
    CHECK(at::allclose(got, x.to(at::kDouble).pow(2).sum(), 1e-12, 0));
  }
  CHECK(kernels::sum_of_squares(t).item<double>() == kernels::cpu::fused_sum_of_squares(t));  // fused on float32
  CHECK(at::equal(kernels::sum_of_squares(t.t()), t.t().to(at::kDouble).pow(2).sum()));  // strided: libtorch's ops
  CHECK(kernels::sum_of_squares(at::empty({0})).item<double>() == 0.0);
}

namespace {
// The aten ops dispatched while `body` ran (top-level and nested), by name.
std::vector<std::string> aten_ops_during(const std::function<void()>& body) {
  static std::vector<std::string> seen;  // RecordFunction callbacks are plain functions
  seen.clear();
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        seen.emplace_back(fn.name());
        return nullptr;
      }).scopes({at::RecordScope::FUNCTION}));
  body();
  at::removeCallback(handle);
  return seen;
}

bool has_op(const std::vector<std::string>& ops, const std::string& part) {
  return std::any_of(ops.begin(), ops.end(), [&](const std::string& op) { return op.find(part) != std::string::npos; });
}

// Sets runtime.cpu_kernels for a scope, and back to fused after it.
struct CpuKernelsScope {
  explicit CpuKernelsScope(CpuKernels kernels) { kernels::use_cpu_kernels(kernels); }
  ~CpuKernelsScope() { kernels::use_cpu_kernels(CpuKernels::kFused); }
};
}  // namespace

TEST_CASE("kernels: runtime.cpu_kernels generic runs libtorch's device-generic ops on a CPU, with the same values") {
  at::manual_seed(5);
  const at::Tensor qkv = at::randn({2, 12, 3, 2, 8});
  const at::Tensor x = at::randn({24, 16}), w = at::randn({16, 40}), bias = at::randn({40});
  at::Tensor fused_y, generic_y, fused_h, generic_h;
  const auto fused = aten_ops_during([&] {
    fused_y = kernels::causal_attention(qkv);
    fused_h = kernels::bias_gelu(kernels::dense_product(x, w), bias);
  });
  CHECK_FALSE(has_op(fused, "scaled_dot_product"));  // the CPU's own attention kernel
  CHECK_FALSE(has_op(fused, "gelu"));
  CHECK(kernels::takes_generic_path(c10::Device(c10::kCPU)) == false);
  {
    CpuKernelsScope generic(CpuKernels::kGeneric);
    CHECK(kernels::takes_generic_path(c10::Device(c10::kCPU)));
    CHECK((kernels::matmul_operand_dtype(MatmulDtype::kBFloat16, c10::Device(c10::kCPU)) == at::kBFloat16));
    const auto ops = aten_ops_during([&] {
      generic_y = kernels::causal_attention(qkv);
      generic_h = kernels::bias_gelu(kernels::dense_product(x, w), bias);
    });
    CHECK(has_op(ops, "scaled_dot_product"));
    CHECK(has_op(ops, "aten::gelu"));
    CHECK(has_op(ops, "aten::mm"));
  }
  CHECK(at::allclose(generic_y, fused_y, 1e-5, 1e-6));
  CHECK(at::allclose(generic_h, fused_h, 1e-5, 1e-5));
}
