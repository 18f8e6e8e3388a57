// Which device and collective backend a rank uses: resolved once from runtime.device and
// runtime.backend against what this build and this machine offer.
#pragma once
#include <string>

#include <c10/core/Device.h>

#include "config/config.h"

namespace spmd {

struct ResolvedRuntime {
  std::string backend = "gloo";  // "gloo" | "nccl"
  std::string device = "cpu";    // "cpu" | "cuda"
  std::string reason;            // one line: what was asked and what was found, for the start banner
};

// Whether this binary was built against a libtorch with CUDA (and so has the NCCL path).
bool built_with_cuda();
// GPUs this process can see (0 on a build without CUDA).
int visible_gpus();

// `auto` picks NCCL on CUDA when the build has CUDA and a GPU is visible, else Gloo on the CPU.
// Asking for cuda/nccl where they cannot run is a UsageError saying which of the two is missing
// ("built without CUDA" or "no GPU visible"); nccl with device cpu is refused too.
ResolvedRuntime resolve_runtime(const RuntimeConfig& runtime);

// The rank's device: cpu, or cuda:LOCAL_RANK (modulo the visible GPUs, so several ranks may share
// one GPU over Gloo). On CUDA it also becomes the process's current device.
c10::Device rank_device(const ResolvedRuntime& runtime, int local_rank);

// Waits until the work queued on `device` is done (CUDA); nothing to wait for on the CPU.
// Benchmarks time with it; the training step never calls it.
void synchronize(c10::Device device);

// The most bytes the device's caching allocator has held in tensors since the process started
// (CUDA); -1 on the CPU (see util/caching_cpu_allocator.h there).
int64_t peak_device_tensor_bytes(c10::Device device);

}  // namespace spmd
