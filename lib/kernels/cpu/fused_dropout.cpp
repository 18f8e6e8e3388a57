#include "kernels/cpu/fused_dropout.h"

#include <algorithm>
#include <vector>

#include <ATen/Parallel.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "util/error.h"

namespace spmd::kernels::cpu {

namespace {

// out = in * M in float32 over the whole block, a row of the last dim at a time (its multipliers
// drawn into a buffer of the task's own); rows are independent, so the threads may split them any
// way. A bf16 input is widened first, as libtorch's bf16 * float32 promotes.
template <typename in_t>
void times_draws(const DropoutDraws& draws, const in_t* in, float* out, int64_t numel) {
  const int64_t row = draws.shape.empty() ? 1 : std::max<int64_t>(draws.shape.back(), 1);
  at::parallel_for(0, numel / row, std::max<int64_t>(1, 16384 / row), [&](int64_t r0, int64_t r1) {
    std::vector<float> m(static_cast<size_t>(row));
    for (int64_t r = r0; r < r1; ++r) {
      draws.fill_row(m.data(), r * row, row);
      const in_t* x = in + r * row;
      float* y = out + r * row;
      for (int64_t j = 0; j < row; ++j) y[j] = static_cast<float>(x[j]) * m[static_cast<size_t>(j)];
    }
  });
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedDropout : torch::autograd::Function<FusedDropout> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const DropoutDraws* draws) {
    const at::Tensor x = x_in.contiguous();
    at::Tensor y = at::empty(x.sizes(), x.options().dtype(at::kFloat));
    if (x.scalar_type() == at::kBFloat16)
      times_draws(*draws, x.const_data_ptr<c10::BFloat16>(), y.data_ptr<float>(), x.numel());
    else
      times_draws(*draws, x.const_data_ptr<float>(), y.data_ptr<float>(), x.numel());
    ctx->saved_data["draws"] = draws->to_ints();  // drawn again in backward, not kept
    ctx->saved_data["dtype"] = x.scalar_type();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const DropoutDraws draws = DropoutDraws::from_ints(ctx->saved_data["draws"].toIntVector());
    const at::Tensor g = grads[0].to(at::kFloat).contiguous();
    at::Tensor gx = at::empty_like(g);
    times_draws(draws, g.const_data_ptr<float>(), gx.data_ptr<float>(), g.numel());
    // In x's dtype, rounded once, as autograd hands a bf16 input its product's gradient.
    return {gx.to(ctx->saved_data["dtype"].toScalarType()), at::Tensor()};
  }
};

}  // namespace

bool fused_dropout_supports(const at::Tensor& x, const DropoutDraws& draws) {
  return x.device().is_cpu() && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) &&
         draws.defined() && draws.shape == x.sizes().vec();
}

at::Tensor fused_dropout(const at::Tensor& x, const DropoutDraws& draws) {
  SPMD_ASSERT(fused_dropout_supports(x, draws),
              "fused_dropout: needs float32 or bf16 x on CPU and draws of its shape, got {} {} and {}",
              c10::toString(x.scalar_type()), x.sizes().vec(), draws.shape);
  return FusedDropout::apply(x, &draws);
}

}  // namespace spmd::kernels::cpu
