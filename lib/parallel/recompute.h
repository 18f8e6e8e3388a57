// Activation recomputation (rematerialization): y = body(x) whose graph is not kept; backward runs
// body again from the saved x and backpropagates through the fresh graph (reentrant, as PyTorch's
// checkpoint). Parameters used inside body get their gradients from that inner backward, hooks
// included. body must compute the same values both times: the runtime's dropout masks are pure
// functions of their indices, so it does.
#pragma once
#include <functional>

#include <ATen/ATen.h>

namespace spmd {

using RecomputedBody = std::function<at::Tensor(const at::Tensor&)>;

// `body` must stay alive until the backward of the returned tensor has run. Without grad mode
// this is just body(x).
at::Tensor recompute_in_backward(const RecomputedBody& body, const at::Tensor& x);

}  // namespace spmd
