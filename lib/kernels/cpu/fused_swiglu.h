// Llama's SwiGLU, silu(gate) * up, as one autograd node with one pass over memory each way (as
// fused_gelu.h for GPT-2's GELU): the forward keeps gate and up, the backward recomputes the
// sigmoid from gate. test_fused_swiglu checks it against at::silu(gate) * up. Callers outside
// lib/kernels use kernels::swiglu (kernels/kernels.h), which picks it.
#pragma once
#include <ATen/ATen.h>

namespace spmd::kernels::cpu {

// Whether fused_swiglu takes gate and up: float32 or bf16 of one dtype and shape on CPU.
bool fused_swiglu_supports(const at::Tensor& gate, const at::Tensor& up);

// silu(gate) * up elementwise, in float32 (bf16 widened, the result rounded once), in their dtype.
at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up);

// Whether fused_swiglu_halves takes gate_up: float32 or bf16 on CPU with an even last dim.
bool fused_swiglu_halves_supports(const at::Tensor& gate_up);

// The same of gate_up (..., 2 F) = [gate | up] -> (..., F), read in place (the gate and up
// product's output, no halves copied out); the gradient is written in gate_up's layout.
at::Tensor fused_swiglu_halves(const at::Tensor& gate_up);

}  // namespace spmd::kernels::cpu
