// The autograd Function behind recompute_in_backward.
#include "parallel/recompute.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace spmd {

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The body goes into the context as an integer handle (saved_data holds IValues).
const RecomputedBody& body_of(AutogradContext* ctx) {
  return *reinterpret_cast<const RecomputedBody*>(static_cast<intptr_t>(ctx->saved_data["body"].toInt()));
}

struct Recompute : torch::autograd::Function<Recompute> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const RecomputedBody* body) {
    ctx->saved_data["body"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(body));
    ctx->save_for_backward({x});
    return (*body)(x);  // autograd is off inside forward: nothing of body's graph is kept
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::AutoGradMode enabled(true);
    at::Tensor y = body_of(ctx)(x);
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), at::Tensor()};
  }
};
}  // namespace

at::Tensor recompute_in_backward(const RecomputedBody& body, const at::Tensor& x) {
  if (!at::GradMode::is_enabled()) return body(x);
  return Recompute::apply(x, &body);
}

}  // namespace spmd
