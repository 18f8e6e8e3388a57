// fused_linear against at::mm / at::addmm: values and gradients of x, W and the bias, for row-major
// and transposed (tied-embedding) weights, on 1 and 2 threads, through sgemm_ and at::addmm_out;
// and cpu::parallel_gemm's row and column splits against at::mm.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include "model/cpu_gemm.h"
#include "model/fused_linear.h"

// libtorch pulls in glog, whose CHECK would silently replace doctest's.
#undef CHECK
#include <doctest/doctest.h>

using namespace spmd;

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

TEST_CASE("fused linear: what it does not take") {
  at::Tensor x = at::randn({4, 6});
  CHECK_FALSE(fused_linear_supports(x.to(at::kDouble), at::randn({6, 3}, at::kDouble)));
  CHECK_FALSE(fused_linear_supports(x, at::randn({5, 3})));                // K mismatch
  CHECK_FALSE(fused_linear_supports(x, at::randn({6, 6, 2}).select(2, 0)));  // strided both ways
  // dense_product() hands those to libtorch instead.
  at::Tensor xd = x.to(at::kDouble), wd = at::randn({6, 3}, at::kDouble), bd = at::randn({3}, at::kDouble);
  CHECK(at::allclose(dense_product(xd, wd, bd), at::addmm(bd, xd, wd)));
  CHECK(at::allclose(dense_product(xd, wd), at::mm(xd, wd)));
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
