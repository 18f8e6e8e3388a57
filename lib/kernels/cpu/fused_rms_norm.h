// A pre-norm block's residual add and RMSNorm on the CPU as one autograd node, one pass over the
// rows each way: sum = x + delta, normed = weight * sum / sqrt(mean(sum^2) + eps). Forward keeps
// the sum, each row's 1 / rms and the weight; backward writes the residual's gradient (the norm's
// plus the one flowing down the stream) and the weight's, summed over fixed row chunks in order
// (the same bits on any thread count). test_fused_rms_norm checks it against the unfused ops.
// Callers outside lib/kernels use kernels::residual_norm (kernels/kernels.h), which picks it.
#pragma once
#include <ATen/ATen.h>

namespace spmd::kernels::cpu {

// Whether fused_residual_rms_norm takes x (float32 on CPU), delta (undefined, or float32 or bf16
// of x's shape), weight (float32 of size x.size(-1)) and out_dtype (float32 or bf16).
bool fused_rms_norm_supports(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                             at::ScalarType out_dtype);

struct SumAndNormed {
  at::Tensor sum;     // x + delta, float32 (x itself without a delta)
  at::Tensor normed;  // RMSNorm(sum) * weight in out_dtype
};
SumAndNormed fused_residual_rms_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                     double eps, at::ScalarType out_dtype);

}  // namespace spmd::kernels::cpu
