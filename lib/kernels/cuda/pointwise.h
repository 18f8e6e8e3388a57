// Rotary embeddings and SwiGLU on a GPU, one kernel each way (pointwise.cuh, compiled by NVRTC for
// the device's architecture on its first use in a process). Built only with CUDA
// (SPMD_WITH_CUDA); kernels::rotary and kernels::swiglu are the entries, with CPU stand-ins.
#pragma once
#include <ATen/ATen.h>

#include "kernels/cuda/nvrtc_program.h"

namespace spmd::kernels::cuda {

// The kernels' source text, as NVRTC receives it.
NvrtcSource pointwise_source();

// out = x rotated by the angles (sign -1: by their opposites); x, out contiguous (B, T, H, D)
// float32 or bf16; cos, sin contiguous float32 (P, T, D), P 1 or B.
void rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double sign, at::Tensor& out);

// out = silu(gate) * up; and its backward. Contiguous tensors of one shape and dtype (float32 or bf16).
void swiglu_forward(const at::Tensor& gate, const at::Tensor& up, at::Tensor& out);
void swiglu_backward(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& d_out, at::Tensor& d_gate,
                     at::Tensor& d_up);

}  // namespace spmd::kernels::cuda
