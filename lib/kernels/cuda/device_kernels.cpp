#include "kernels/cuda/device_kernels.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include <ATen/cuda/CUDAContext.h>
#include <fmt/format.h>

#include "util/error.h"

namespace spmd::kernels::cuda {

const void* device_kernel(const NvrtcSource& source, const std::string& name, int device_index) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, int>, std::string> images;  // (source, device) -> image
  static std::map<std::pair<std::string, int>, const void*> kernels;  // (kernel, device) -> handle
  std::lock_guard<std::mutex> lock(mutex);
  const auto found = kernels.find({name, device_index});
  if (found != kernels.end()) return found->second;
  auto image = images.find({source.name, device_index});
  if (image == images.end()) {
    const cudaDeviceProp* props = at::cuda::getDeviceProperties(device_index);
    image = images.emplace(std::make_pair(source.name, device_index),
                           nvrtc_compile(source, nvrtc_architecture(props->major, props->minor)))
                .first;
  }
  return kernels.emplace(std::make_pair(name, device_index), load_kernel(image->second, name)).first->second;
}

void launch_on_device(const NvrtcSource& source, const std::string& name, int device_index, dim3 grid, dim3 block,
                      void** args, size_t shared_bytes) {
  const cudaError_t launched = cudaLaunchKernel(device_kernel(source, name, device_index), grid, block, args,
                                                shared_bytes, at::cuda::getCurrentCUDAStream(device_index));
  if (launched != cudaSuccess)
    throw RuntimeError(fmt::format("CUDA: launching {} failed: {}", name, cudaGetErrorString(launched)));
}

unsigned grid_stride_blocks(long long work, unsigned threads, int device_index) {
  const long long sms = at::cuda::getDeviceProperties(device_index)->multiProcessorCount;
  return static_cast<unsigned>(std::max(1LL, std::min((work + threads - 1) / threads, sms * 16)));
}

}  // namespace spmd::kernels::cuda
