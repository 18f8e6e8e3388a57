// CPU stand-ins for the calls only a GPU has (a product with a float32 result from bf16
// operands: cuBLAS's out_dtype): the same inputs, outputs and numerics, slow where they must be,
// so that the GPU's code path runs end to end on a CPU (runtime.cpu_kernels: generic). Each
// records itself under one libtorch RecordFunction named "spmd::...", with its tensors, so that a
// census of the ops counts it as the one launch it is on the GPU, with its real bytes.
#pragma once
#include <cstdint>
#include <utility>

#include <ATen/ATen.h>

namespace spmd::kernels::gpu_stand_in {

// x (n, K) w (K, N), any dtypes, -> (n, N) float32: every product of the operands' values
// exact, the sums in float32 (what cuBLAS does for bf16 operands with a float32 result).
at::Tensor mm_float_out(const at::Tensor& x, const at::Tensor& w);

// acc (float32, (K, N)) += alpha x w, the same numerics, in place.
void addmm_float_out(const at::Tensor& acc, const at::Tensor& x, const at::Tensor& w, double alpha);

// kernels/cuda/softmax_cross_entropy.cuh: each row's loss from float32 logits (n, V) (columns
// >= valid: padding; a negative target: loss 0) and, where `grad`, softmax - one_hot rounded once
// to `grad_dtype` (the softmax alone on a row without a target). {losses (n,), grad or undefined}.
std::pair<at::Tensor, at::Tensor> softmax_cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                                                        int64_t valid, bool grad, at::ScalarType grad_dtype);

// kernels/cuda/residual_norm.cuh, forward: for (rows, C) x (float32) and delta, sum = x + delta,
// LayerNorm (or, with `rms`, RMSNorm) of it with weight (and bias, undefined for none) in
// `out_dtype`, and each row's mean (0 for RMSNorm) and 1/std. {sum, normed, mean, rstd}. An
// undefined delta: sum is x itself.
struct ResidualNormForward {
  at::Tensor sum, normed, mean, rstd;
};
ResidualNormForward residual_norm_forward(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                          const at::Tensor& bias, double eps, bool rms, at::ScalarType out_dtype);

// Its backward: d_sum = d_sum_in (undefined: 0) + the norm's input gradient from d_normed,
// d_delta = d_sum in `delta_dtype` (Undefined: none), and the weight's and bias's gradients
// (float32, (C,)).
struct ResidualNormBackward {
  at::Tensor d_sum, d_delta, d_weight, d_bias;
};
ResidualNormBackward residual_norm_backward(const at::Tensor& sum, const at::Tensor& weight, const at::Tensor& mean,
                                            const at::Tensor& rstd, const at::Tensor& d_normed,
                                            const at::Tensor& d_sum_in, bool rms, at::ScalarType delta_dtype);

// kernels/cuda/pointwise.cuh: x (B, T, H, D) rotated by the angles whose cos, sin are float32
// (P, T, 1, D) (sign -1: by their opposites, the backward), in float32, rounded once to x's dtype.
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double sign);

// silu(gate) * up in float32, rounded once; its backward {d_gate, d_up}, likewise.
at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up);
std::pair<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& d_out);

}  // namespace spmd::kernels::gpu_stand_in
