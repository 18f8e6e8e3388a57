// The stand-ins compute in float32 on the operands' values (bf16 values are exact in float32),
// which is what a float32-accumulating GPU product does, up to the order of its sums.
#include "kernels/gpu_stand_ins.h"

#include <cmath>
#include <utility>
#include <vector>

#include <ATen/record_function.h>

namespace spmd::kernels::gpu_stand_in {

namespace {
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

}  // namespace spmd::kernels::gpu_stand_in
