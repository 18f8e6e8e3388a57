// The stand-ins compute in float32 on the operands' values (bf16 values are exact in float32),
// which is what a float32-accumulating GPU product does, up to the order of its sums.
#include "kernels/gpu_stand_ins.h"

#include <cmath>
#include <initializer_list>
#include <utility>
#include <vector>

#include <ATen/record_function.h>

namespace spmd::kernels::gpu_stand_in {

namespace {
// The defined tensors among `tensors`, as a RecordFunction's inputs (an absent bias is no input).
std::vector<c10::IValue> defined_of(std::initializer_list<at::Tensor> tensors) {
  std::vector<c10::IValue> values;
  for (const at::Tensor& t : tensors)
    if (t.defined()) values.emplace_back(t);
  return values;
}

// The outputs a census reads; RecordFunction takes them only where a callback asked for them.
void record_outputs(at::RecordFunction& guard, std::vector<c10::IValue> outputs) {
  if (guard.isActive() && guard.needsOutputs()) guard.setOutputs(std::move(outputs));
}
}  // namespace

at::Tensor mm_float_out(const at::Tensor& x, const at::Tensor& w) {
  RECORD_FUNCTION("spmd::mm_float_out", std::vector<c10::IValue>({x, w}));
  at::Tensor out = at::mm(x.to(at::kFloat), w.to(at::kFloat));
  record_outputs(guard, {out});
  return out;
}

void addmm_float_out(const at::Tensor& acc, const at::Tensor& x, const at::Tensor& w, double alpha) {
  RECORD_FUNCTION("spmd::addmm_float_out", std::vector<c10::IValue>({acc, x, w}));
  at::Tensor target = acc;  // addmm_ takes a non-const reference to a handle sharing acc
  target.addmm_(x.to(at::kFloat), w.to(at::kFloat), 1.0, alpha);
  record_outputs(guard, {acc});
}

std::pair<at::Tensor, at::Tensor> softmax_cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                                                        int64_t valid, bool grad, at::ScalarType grad_dtype) {
  RECORD_FUNCTION("spmd::softmax_cross_entropy", std::vector<c10::IValue>({logits, targets}));
  const int64_t V = logits.size(1);
  at::Tensor z = logits;
  if (valid < V) {
    z = logits.clone();
    z.narrow(1, valid, V - valid).fill_(-INFINITY);
  }
  at::Tensor log_probs = at::_log_softmax(z, 1, /*half_to_float=*/false);
  const at::Tensor scored = targets >= 0;
  const at::Tensor column = targets.masked_fill(~scored, 0).unsqueeze(1);
  const at::Tensor losses = log_probs.gather(1, column).squeeze(1).neg().masked_fill_(~scored, 0.0);
  if (!grad) {
    record_outputs(guard, {losses});
    return {losses, at::Tensor()};
  }
  at::Tensor probs = log_probs.exp_();
  probs.scatter_add_(1, column, scored.to(at::kFloat).neg().unsqueeze(1));
  at::Tensor g = probs.to(grad_dtype);
  record_outputs(guard, {losses, g});
  return {losses, g};
}

ResidualNormForward residual_norm_forward(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                          const at::Tensor& bias, double eps, bool rms, at::ScalarType out_dtype) {
  RECORD_FUNCTION("spmd::residual_norm", defined_of({x, delta, weight, bias}));
  ResidualNormForward f;
  f.sum = delta.defined() ? x + delta.to(at::kFloat) : x;
  const int64_t C = x.size(1);
  f.mean = rms ? at::zeros({x.size(0)}, x.options()) : f.sum.sum(1) / static_cast<double>(C);
  const at::Tensor centred = f.sum - f.mean.unsqueeze(1);
  f.rstd = at::rsqrt(centred.square().sum(1) / static_cast<double>(C) + eps);
  at::Tensor normed = centred * f.rstd.unsqueeze(1) * weight;
  if (bias.defined()) normed = normed + bias;
  f.normed = normed.to(out_dtype);
  record_outputs(guard, delta.defined() ? std::vector<c10::IValue>{f.sum, f.normed, f.mean, f.rstd}
                                        : std::vector<c10::IValue>{f.normed, f.mean, f.rstd});  // no sum: x itself
  return f;
}

ResidualNormBackward residual_norm_backward(const at::Tensor& sum, const at::Tensor& weight, const at::Tensor& mean,
                                            const at::Tensor& rstd, const at::Tensor& d_normed,
                                            const at::Tensor& d_sum_in, bool rms, at::ScalarType delta_dtype) {
  RECORD_FUNCTION("spmd::residual_norm_backward",
                  defined_of({sum, weight, mean, rstd, d_normed, d_sum_in}));
  const double C = static_cast<double>(sum.size(1));
  const at::Tensor xhat = (sum - mean.unsqueeze(1)) * rstd.unsqueeze(1);
  const at::Tensor dn = d_normed.to(at::kFloat);
  const at::Tensor g = dn * weight;
  const at::Tensor mean_g_xhat = (g * xhat).sum(1, /*keepdim=*/true) / C;
  at::Tensor centred_g = rms ? g : g - g.sum(1, /*keepdim=*/true) / C;
  ResidualNormBackward b;
  b.d_sum = (centred_g - xhat * mean_g_xhat) * rstd.unsqueeze(1);
  if (d_sum_in.defined()) b.d_sum = b.d_sum + d_sum_in;
  if (delta_dtype != at::ScalarType::Undefined) b.d_delta = b.d_sum.to(delta_dtype);
  b.d_weight = (dn * xhat).sum(0);
  b.d_bias = dn.sum(0);
  record_outputs(guard, b.d_delta.defined() ? std::vector<c10::IValue>{b.d_sum, b.d_delta, b.d_weight, b.d_bias}
                                            : std::vector<c10::IValue>{b.d_sum, b.d_weight, b.d_bias});
  return b;
}

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double sign) {
  RECORD_FUNCTION("spmd::rotary", defined_of({x, cos, sin}));
  const int64_t half = x.size(-1) / 2;
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor rotated = at::cat({-x32.narrow(-1, half, half), x32.narrow(-1, 0, half)}, -1);
  at::Tensor out = (x32 * cos + rotated * sin * sign).to(x.scalar_type());
  record_outputs(guard, {out});
  return out;
}

at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up) {
  RECORD_FUNCTION("spmd::swiglu", defined_of({gate, up}));
  at::Tensor out = (at::silu(gate.to(at::kFloat)) * up.to(at::kFloat)).to(gate.scalar_type());
  record_outputs(guard, {out});
  return out;
}

std::pair<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& d_out) {
  RECORD_FUNCTION("spmd::swiglu_backward", defined_of({gate, up, d_out}));
  const at::Tensor g = gate.to(at::kFloat), u = up.to(at::kFloat), dy = d_out.to(at::kFloat);
  const at::Tensor s = at::sigmoid(g);
  at::Tensor d_gate = (dy * u * s * (1 + g * (1 - s))).to(gate.scalar_type());
  at::Tensor d_up = (dy * g * s).to(up.scalar_type());
  record_outputs(guard, {d_gate, d_up});
  return {d_gate, d_up};
}

}  // namespace spmd::kernels::gpu_stand_in
