// GPT-2's tanh-approximate GELU of (x + bias) as one autograd node with one pass over memory each
// way. Uses 0.5 (1 + tanh(u)) = sigmoid(2u), so the only transcendental is one exp per element
// (libtorch's vectorized tanh cost about four exps when measured). test_fused_gelu checks it against
// at::gelu(x + bias, "tanh"). Callers outside lib/kernels use kernels::bias_gelu (kernels/kernels.h).
#pragma once
#include <ATen/ATen.h>

namespace spmd::kernels::cpu {

// Whether fused_bias_gelu takes x (float32 or bfloat16 on CPU) and bias (undefined, or of x's
// dtype and size x.size(-1) on CPU); otherwise use at::gelu(x + bias, "tanh").
bool fused_gelu_supports(const at::Tensor& x, const at::Tensor& bias = at::Tensor());

// gelu_tanh(x + bias), bias undefined or of size x.size(-1) (broadcast over the leading dims).
at::Tensor fused_bias_gelu(const at::Tensor& x, const at::Tensor& bias = at::Tensor());

}  // namespace spmd::kernels::cpu
