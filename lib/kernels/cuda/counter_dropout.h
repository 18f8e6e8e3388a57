// The dropout mask of a block, drawn on a GPU in one pass (counter_dropout.cuh, compiled by NVRTC
// for the device's architecture on its first use in a process): the CPU loop's bits
// (kernels/counter_hash.h). Built only with CUDA (SPMD_WITH_CUDA).
#pragma once
#include <ATen/ATen.h>

#include "kernels/counter_hash.h"
#include "kernels/cuda/nvrtc_program.h"

namespace spmd::kernels::cuda {

// The kernel's source text and the headers it includes, as NVRTC receives them.
NvrtcSource counter_dropout_source();

// Writes into `out` (contiguous float on a CUDA device, the block's local shape) each element's
// counter_hash::dropout_element at its global index, on the device's current stream.
void counter_dropout_mask(at::Tensor& out, const counter_hash::BlockIndex& block, uint64_t key, double p_scaled,
                          float keep_scale);

}  // namespace spmd::kernels::cuda
