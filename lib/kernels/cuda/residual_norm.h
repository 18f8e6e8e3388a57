// The residual add and the norm after it, forward and backward, one kernel each on a GPU
// (residual_norm.cuh, compiled by NVRTC for the device's architecture on its first use in a
// process). Built only with CUDA (SPMD_WITH_CUDA); kernels/residual_norm.h is the entry, with a
// CPU stand-in.
#pragma once
#include <ATen/ATen.h>

#include "kernels/cuda/nvrtc_program.h"

namespace spmd::kernels::cuda {

// The kernels' source text, as NVRTC receives it.
NvrtcSource residual_norm_source();

// Contiguous (rows, C) tensors on one CUDA device, float32 but for delta / normed / d_normed /
// d_delta (float32 or bfloat16); bias undefined for none (and for RMSNorm); delta undefined: the
// sum is x (not written), and then d_delta undefined too. Forward writes sum,
// normed, mean and rstd ((rows,) each; mean 0 for RMSNorm); backward writes d_sum (d_sum_in
// added where defined), d_delta, and the weight's and bias's gradients ((C,) float32).
void residual_norm_forward(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                           const at::Tensor& bias, double eps, bool rms, at::Tensor& sum, at::Tensor& normed,
                           at::Tensor& mean, at::Tensor& rstd);
void residual_norm_backward(const at::Tensor& sum, const at::Tensor& weight, const at::Tensor& mean,
                            const at::Tensor& rstd, const at::Tensor& d_normed, const at::Tensor& d_sum_in, bool rms,
                            at::Tensor& d_sum, at::Tensor& d_delta, at::Tensor& d_weight, at::Tensor& d_bias);

}  // namespace spmd::kernels::cuda
