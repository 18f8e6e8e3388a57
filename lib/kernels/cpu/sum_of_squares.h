// sum(x^2) of a float32 CPU tensor in one pass, accumulated in double, without a double copy of
// it (the gradient-norm reduction). Callers outside lib/kernels use kernels::sum_of_squares.
#pragma once
#include <ATen/ATen.h>

namespace spmd::kernels::cpu {

// Whether fused_sum_of_squares takes t: float32, contiguous, on CPU.
bool fused_sum_of_squares_supports(const at::Tensor& t);

// sum(t^2) in double, in vector lanes (reassociated; the order is fixed by the binary and the
// thread count, so reruns agree).
double fused_sum_of_squares(const at::Tensor& t);

}  // namespace spmd::kernels::cpu
