// The GPU's dropout mask in one pass, compiled at run time by NVRTC (kernels/cuda/nvrtc_program.h),
// never by the C++ build: each thread writes the multipliers (0 or keep_scale, float) of the
// elements it strides over, from their global indices. The per-element math is
// kernels/counter_hash.h's, the CPU loop's own, so the bits are the CPU's.
#include "kernels/counter_hash.h"

extern "C" __global__ void spmd_counter_dropout_mask(float* out, unsigned long long numel,
                                                     spmd::counter_hash::BlockIndex block, unsigned long long key,
                                                     double p_scaled, float keep_scale) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += stride)
    out[i] = spmd::counter_hash::dropout_element(key, spmd::counter_hash::global_index(block, i), p_scaled,
                                                 keep_scale);
}
