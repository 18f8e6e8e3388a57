// Finds and loads libspmd_cuda.so (see cuda_module.h).
#include "kernels/cuda_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <mutex>

#include "util/error.h"

namespace spmd::cuda {

namespace {

const Module* g_module = nullptr;
std::mutex g_mutex;

const Module& load() {
#ifdef SPMD_CUDA_MODULE_PATH
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (g_module) return *g_module;
  // RTLD_GLOBAL: libtorch_cuda and NCCL as if linked into the program.
  void* handle = dlopen(SPMD_CUDA_MODULE_PATH, RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* why = dlerror();
    throw RuntimeError(fmt::format("cannot load this build's CUDA module {} ({}); rebuild with bash scripts/build",
                                   SPMD_CUDA_MODULE_PATH, why ? why : "no reason given"));
  }
  using Entry = const Module* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "spmd_cuda_module"));
  if (!entry) throw RuntimeError(fmt::format("{} has no spmd_cuda_module entry", SPMD_CUDA_MODULE_PATH));
  g_module = entry();
  return *g_module;
#else
  throw RuntimeError("the CUDA module was asked for in a build without CUDA (" SPMD_CUDA_OFF_REASON ")");
#endif
}

// Loaded at start where a GPU may be; a failure here is reported by the first module() call.
[[maybe_unused]] const bool g_loaded_at_start = [] {
  if (!built() || !gpu_device_node_present()) return false;
  try {
    load();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}();

}  // namespace

bool built() {
#ifdef SPMD_CUDA_MODULE_PATH
  return true;
#else
  return false;
#endif
}

bool gpu_device_node_present() {
  for (const char* node : {"/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg"})
    if (access(node, F_OK) == 0) return true;
  return false;
}

bool loaded() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return g_module != nullptr;
}

const Module& module() { return load(); }

}  // namespace spmd::cuda
