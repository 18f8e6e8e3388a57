// libspmd_cuda.so's one entry: the table of cuda_module.h, over libtorch_cuda, cudart and NCCL.
#include <cuda_runtime_api.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL  // ProcessGroupNCCL.hpp declares nothing without it
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "kernels/cuda/counter_dropout.h"
#include "kernels/cuda/pointwise.h"
#include "kernels/cuda/residual_norm.h"
#include "kernels/cuda/softmax_cross_entropy.h"
#include "kernels/cuda_module.h"

namespace spmd::cuda {
namespace {

int device_count() { return static_cast<int>(c10::cuda::device_count()); }

void set_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

void synchronize(int /*index*/) { c10::cuda::device_synchronize(); }

std::string device_name(int index) {
  cudaDeviceProp properties{};
  return cudaGetDeviceProperties(&properties, index) == cudaSuccess ? std::string(properties.name) : "";
}

std::string pci_bus_id(int index) {
  char bus_id[32] = {};
  return cudaDeviceGetPCIBusId(bus_id, static_cast<int>(sizeof bus_id), index) == cudaSuccess ? bus_id : "";
}

int64_t peak_allocated_bytes(int index) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;  // the watchdog tears the process down when a collective outlives it
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}

const Module kModule{device_count,
                     set_device,
                     synchronize,
                     device_name,
                     pci_bus_id,
                     peak_allocated_bytes,
                     make_nccl,
                     kernels::cuda::counter_dropout_mask,
                     kernels::cuda::softmax_cross_entropy,
                     kernels::cuda::residual_norm_forward,
                     kernels::cuda::residual_norm_backward,
                     kernels::cuda::rotary,
                     kernels::cuda::swiglu_forward,
                     kernels::cuda::swiglu_backward};

}  // namespace
}  // namespace spmd::cuda

extern "C" __attribute__((visibility("default"))) const spmd::cuda::Module* spmd_cuda_module() {
  return &spmd::cuda::kModule;
}
