// The stand-ins compute in float32 on the operands' values (bf16 values are exact in float32),
// which is what a float32-accumulating GPU product does, up to the order of its sums.
#include "kernels/gpu_stand_ins.h"

#include <vector>

#include <ATen/record_function.h>

namespace spmd::kernels::gpu_stand_in {

namespace {
// The outputs a census reads; RecordFunction takes them only where a callback asked for them.
void record_outputs(at::RecordFunction& guard, const at::Tensor& out) {
  if (guard.isActive() && guard.needsOutputs()) guard.setOutputs(std::vector<c10::IValue>{out});
}
}  // namespace

at::Tensor mm_float_out(const at::Tensor& x, const at::Tensor& w) {
  RECORD_FUNCTION("spmd::mm_float_out", std::vector<c10::IValue>({x, w}));
  at::Tensor out = at::mm(x.to(at::kFloat), w.to(at::kFloat));
  record_outputs(guard, out);
  return out;
}

void addmm_float_out(const at::Tensor& acc, const at::Tensor& x, const at::Tensor& w, double alpha) {
  RECORD_FUNCTION("spmd::addmm_float_out", std::vector<c10::IValue>({acc, x, w}));
  at::Tensor target = acc;  // addmm_ takes a non-const reference to a handle sharing acc
  target.addmm_(x.to(at::kFloat), w.to(at::kFloat), 1.0, alpha);
  record_outputs(guard, acc);
}

}  // namespace spmd::kernels::gpu_stand_in
