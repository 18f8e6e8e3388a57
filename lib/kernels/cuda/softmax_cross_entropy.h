// The LM head's loss and gradient on a GPU in one kernel (softmax_cross_entropy.cuh, compiled by
// NVRTC for the device's architecture on its first use in a process). Built only with CUDA
// (SPMD_WITH_CUDA); kernels::softmax_cross_entropy is the entry, with a CPU stand-in.
#pragma once
#include <ATen/ATen.h>

#include "kernels/cuda/nvrtc_program.h"

namespace spmd::kernels::cuda {

// The kernel's source text, as NVRTC receives it.
NvrtcSource softmax_cross_entropy_source();

// logits (n, V) float32 with unit column stride, targets (n,) int64, on one CUDA device: writes
// losses (n,) float32 and, where defined, grad (n, V) bfloat16 (unit column stride), on the
// device's current stream.
void softmax_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t valid, at::Tensor& losses,
                           at::Tensor& grad);

}  // namespace spmd::kernels::cuda
