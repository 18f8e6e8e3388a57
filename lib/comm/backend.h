// Which device and collective backend a rank uses: resolved once from runtime.device and
// runtime.backend against what this build and this machine offer.
#pragma once
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "config/config.h"

namespace spmd {

struct ResolvedRuntime {
  std::string backend = "gloo";  // "gloo" | "nccl"
  std::string device = "cpu";    // "cpu" | "cuda"
  std::string reason;            // one line: what was asked and what was found, for the start banner
  std::string asked_backend = "auto";  // runtime.backend as configured: whether NCCL was a choice or an order
  bool tf32 = false;             // fp32 matmuls on TF32 tensor cores: runtime.tf32 on CUDA (never on the CPU)
};

// Whether this binary was built against a libtorch with CUDA (and so has the NCCL path).
bool built_with_cuda();
// GPUs this process can see (0 on a build without CUDA).
int visible_gpus();

// `auto` picks NCCL on CUDA when the build has CUDA and a GPU is visible, else Gloo on the CPU.
// Asking for cuda/nccl where they cannot run is a UsageError saying which of the two is missing
// ("built without CUDA" or "no GPU visible"); nccl with device cpu is refused too.
ResolvedRuntime resolve_runtime(const RuntimeConfig& runtime);

// A GPU as ranks on any host can compare it: "host/PCI bus id" ("node3/0000:3b:00.0"), so two
// ranks match only on the same machine's same GPU, whatever CUDA_VISIBLE_DEVICES each was given.
std::string gpu_identity(c10::Device device);

// The backend once every rank's GPU is known (gpu_ids[r]: rank r's gpu_identity). NCCL refuses
// two ranks on one GPU: under backend `auto` such ranks fall back to Gloo (CUDA tensors) and
// `reason` says so; an asked `nccl` is a UsageError naming the GPU and the ranks that share it.
// A pure function of its arguments.
ResolvedRuntime settle_backend_for_gpus(ResolvedRuntime runtime, const std::vector<std::string>& gpu_ids);

// The launcher's check before it starts `local_ranks` processes on this host (each takes GPU
// LOCAL_RANK modulo the visible GPUs, see rank_device): an asked `nccl` with more ranks than GPUs
// is a UsageError before any process starts. Nothing to check on the CPU or under `auto`.
void refuse_shared_gpus(const RuntimeConfig& runtime, int local_ranks);

// The rank's device: cpu, or cuda:LOCAL_RANK (modulo the visible GPUs, so several ranks may share
// one GPU over Gloo). On CUDA it also becomes the process's current device, and its fp32 matmuls
// take TF32 tensor cores or not (runtime.tf32, as ResolvedRuntime::tf32 says).
c10::Device rank_device(const ResolvedRuntime& runtime, int local_rank);

// Waits until the work queued on `device` is done (CUDA); nothing to wait for on the CPU.
// Benchmarks time with it; the training step never calls it.
void synchronize(c10::Device device);

// The GPU's product name ("NVIDIA H100 80GB HBM3"); "" on the CPU.
std::string device_name(c10::Device device);

// The most bytes the device's caching allocator has held in tensors since the process started
// (CUDA); -1 on the CPU (see util/caching_cpu_allocator.h there).
int64_t peak_device_tensor_bytes(c10::Device device);

}  // namespace spmd
