// Device and backend selection (see backend.h); the CUDA calls go through the CUDA module
// (kernels/cuda_module.h), which a CUDA build loads only where a GPU can be.
#include "comm/backend.h"

#include <map>

#include <ATen/Context.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include "kernels/cuda_module.h"
#include "util/error.h"

namespace spmd {

bool built_with_cuda() { return cuda::built(); }

int visible_gpus() {
  if (!cuda::built() || !cuda::gpu_device_node_present()) return 0;  // nothing loaded, no driver asked
  return cuda::module().device_count();
}

namespace {
// Whether the CUDA libraries are in this process, for the runtime line.
std::string cuda_load_note() {
  if (cuda::loaded()) return " (loaded)";
  if (!cuda::gpu_device_node_present()) return " (not loaded: no GPU device node, /dev/nvidiactl, /dev/nvidia0 or /dev/dxg)";
  return " (not loaded)";
}

// Why `key: value` cannot run here, or "" when it can.
std::string cuda_unavailable(const std::string& key, const std::string& value) {
  if (!built_with_cuda())
    return fmt::format("{}: {} needs CUDA, but this spmd-train was built without CUDA ({}; bash scripts/build "
                       "builds CUDA in wherever the torch wheel has it); use cpu/gloo or auto",
                       key, value, SPMD_CUDA_OFF_REASON);
  if (visible_gpus() == 0)
    return fmt::format("{}: {} needs a GPU, but no GPU visible (this CUDA build found 0 devices; check the driver and "
                       "CUDA_VISIBLE_DEVICES); use cpu/gloo or auto",
                       key, value);
  return "";
}
}  // namespace

ResolvedRuntime resolve_runtime(const RuntimeConfig& runtime) {
  const int gpus = visible_gpus();  // loads the CUDA module where a GPU device node exists
  const bool gpu = gpus > 0;
  ResolvedRuntime r;
  if (runtime.device == "cuda") {
    const std::string why = cuda_unavailable("runtime.device", "cuda");
    SPMD_CHECK(why.empty(), "{}", why);
  }
  if (runtime.backend == "nccl") {
    const std::string why = cuda_unavailable("runtime.backend", "nccl");
    SPMD_CHECK(why.empty(), "{}", why);
    SPMD_CHECK(runtime.device != "cpu",
               "runtime.backend: nccl moves CUDA tensors only, but runtime.device is cpu; use device cuda (or auto), "
               "or backend gloo");
  }
  r.asked_backend = runtime.backend;
  r.device = runtime.device == "auto" ? (gpu ? "cuda" : "cpu") : runtime.device;
  if (runtime.backend == "nccl") r.device = "cuda";
  r.backend = runtime.backend == "auto" ? (r.device == "cuda" ? "nccl" : "gloo") : runtime.backend;
  r.reason = fmt::format("runtime: device {} ({}), backend {} ({}); this build {} CUDA{}, {} GPU(s) visible", r.device,
                         runtime.device == "auto" ? "auto" : "asked", r.backend,
                         runtime.backend == "auto" ? "auto" : "asked", built_with_cuda() ? "has" : "lacks",
                         built_with_cuda() ? cuda_load_note() : fmt::format(" ({})", SPMD_CUDA_OFF_REASON), gpus);
  r.tf32 = r.device == "cuda" && runtime.tf32;
  if (r.device == "cuda")
    r.reason += r.tf32 ? "; fp32 matmuls on TF32 tensor cores (runtime.tf32)"
                       : "; fp32 matmuls in full fp32 (runtime.tf32: false)";
  return r;
}

std::string gpu_identity(c10::Device device) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  if (device.is_cuda()) {
    const std::string bus_id = cuda::module().pci_bus_id(device.index());
    if (!bus_id.empty()) return fmt::format("{}/{}", host, bus_id);
  }
  return fmt::format("{}/{}", host, device.str());  // no bus id to be had: the index still tells GPUs apart
}

ResolvedRuntime settle_backend_for_gpus(ResolvedRuntime runtime, const std::vector<std::string>& gpu_ids) {
  if (runtime.backend != "nccl") return runtime;
  std::map<std::string, std::vector<size_t>> ranks_on;
  for (size_t rank = 0; rank < gpu_ids.size(); ++rank) ranks_on[gpu_ids[rank]].push_back(rank);
  for (const auto& [gpu, ranks] : ranks_on) {
    if (ranks.size() < 2) continue;
    const std::string clash = fmt::format("ranks {} share GPU {}", fmt::join(ranks, ", "), gpu);
    SPMD_CHECK(runtime.asked_backend != "nccl",
               "runtime.backend: nccl needs a GPU of its own for every rank, but {} (NCCL refuses two ranks on one "
               "GPU); start no more ranks per host than it has GPUs, or set runtime.backend to gloo or auto",
               clash);
    runtime.backend = "gloo";
    runtime.reason += fmt::format("; {}: backend auto falls back to gloo (NCCL refuses two ranks on one GPU)", clash);
    return runtime;
  }
  return runtime;
}

void refuse_shared_gpus(const RuntimeConfig& config, int local_ranks) {
  const ResolvedRuntime runtime = resolve_runtime(config);
  if (runtime.device != "cuda" || runtime.asked_backend != "nccl") return;
  std::vector<std::string> gpu_ids;
  for (int local_rank = 0; local_rank < local_ranks; ++local_rank)
    gpu_ids.push_back(gpu_identity(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % visible_gpus()))));
  settle_backend_for_gpus(runtime, gpu_ids);
}

c10::Device rank_device(const ResolvedRuntime& runtime, int local_rank) {
  if (runtime.device != "cuda") return c10::Device(c10::kCPU);
  const auto index = static_cast<c10::DeviceIndex>(local_rank % visible_gpus());
  cuda::module().set_device(index);  // NCCL and the caching allocator work on the current device
  // cuBLAS's fp32 products on TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation), as
  // PyTorch's torch.backends.cuda.matmul.fp32_precision = "tf32" (the newer form of allow_tf32;
  // libtorch refuses a mix of the two); off: "ieee", full fp32 products.
  at::globalContext().setFloat32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL,
                                          runtime.tf32 ? at::Float32Precision::TF32 : at::Float32Precision::IEEE);
  return c10::Device(c10::kCUDA, index);
}

void synchronize(c10::Device device) {
  if (device.is_cuda()) cuda::module().synchronize(device.index());
}

std::string device_name(c10::Device device) {
  return device.is_cuda() ? cuda::module().device_name(device.index()) : "";
}

int64_t peak_device_tensor_bytes(c10::Device device) {
  return device.is_cuda() ? cuda::module().peak_allocated_bytes(device.index()) : -1;
}

}  // namespace spmd
