// kernels::rotary, kernels::swiglu and swiglu_halves (kernels.h): their autograd nodes, each one
// op forward and one backward: the GPU kernel (kernels/cuda/pointwise.cuh) or its CPU stand-in.
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/cpu/fused_swiglu.h"
#include "kernels/cuda_module.h"
#include "kernels/gpu_stand_ins.h"
#include "kernels/kernels.h"

namespace spmd::kernels {

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x rotated by the angles (sign -1: back); the GPU kernel takes (P, T, D) angles.
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double sign) {
  if (!x.is_cuda()) return gpu_stand_in::rotary(x, cos, sin, sign);
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  const auto angles = [](const at::Tensor& t) { return t.reshape({t.size(0), t.size(1), t.size(3)}).contiguous(); };
  spmd::cuda::module().rotary(xc, angles(cos), angles(sin), sign, out);
  return out;
}

struct Rotary : torch::autograd::Function<Rotary> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rotate(x, cos, sin, 1.0);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {rotate(grads[0], saved[0], saved[1], -1.0), at::Tensor(), at::Tensor()};
  }
};

struct SwiGlu : torch::autograd::Function<SwiGlu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_in, const at::Tensor& up_in) {
    const at::Tensor gate = gate_in.contiguous(), up = up_in.contiguous();
    ctx->save_for_backward({gate, up});
    if (!gate.is_cuda()) return gpu_stand_in::swiglu_forward(gate, up);
    at::Tensor out = at::empty_like(gate);
    spmd::cuda::module().swiglu_forward(gate, up, out);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor d_out = grads[0].contiguous();
    if (!d_out.is_cuda()) {
      auto [d_gate, d_up] = gpu_stand_in::swiglu_backward(saved[0], saved[1], d_out);
      return {d_gate, d_up};
    }
    at::Tensor d_gate = at::empty_like(saved[0]), d_up = at::empty_like(saved[1]);
    spmd::cuda::module().swiglu_backward(saved[0], saved[1], d_out, d_gate, d_up);
    return {d_gate, d_up};
  }
};
}  // namespace

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return Rotary::apply(x, cos, sin);
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  if (!takes_generic_path(gate.device()) && cpu::fused_swiglu_supports(gate, up)) return cpu::fused_swiglu(gate, up);
  if (!takes_generic_path(gate.device()) || gate.scalar_type() != up.scalar_type() || gate.sizes() != up.sizes())
    return at::silu(gate) * up;
  return SwiGlu::apply(gate, up);
}

at::Tensor swiglu_halves(const at::Tensor& gate_up) {
  if (!takes_generic_path(gate_up.device()) && cpu::fused_swiglu_halves_supports(gate_up))
    return cpu::fused_swiglu_halves(gate_up);
  const int64_t F = gate_up.size(-1) / 2;
  return swiglu(gate_up.narrow(-1, 0, F), gate_up.narrow(-1, F, F));
}

}  // namespace spmd::kernels
