// The kernels of our own on a device: each source compiled by NVRTC for the device's architecture
// on its first use in a process, its kernels loaded once and looked up after (every layer, every
// step), and launched on the device's current stream. Built only with CUDA (SPMD_WITH_CUDA).
#pragma once
#include <cstddef>
#include <string>

#include <cuda_runtime_api.h>

#include "kernels/cuda/nvrtc_program.h"

namespace spmd::kernels::cuda {

// The kernel `name` of `source` (its `name` field tells sources apart) for device `device_index`.
const void* device_kernel(const NvrtcSource& source, const std::string& name, int device_index);

// Launches it on the device's current stream; a launch error is a RuntimeError naming the kernel.
void launch_on_device(const NvrtcSource& source, const std::string& name, int device_index, dim3 grid, dim3 block,
                      void** args, size_t shared_bytes = 0);

// Blocks for a grid-stride loop over `work` items: enough to fill every SM several times over.
unsigned grid_stride_blocks(long long work, unsigned threads, int device_index);

}  // namespace spmd::kernels::cuda
