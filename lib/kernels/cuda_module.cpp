// Finds and loads libspmd_cuda.so (see cuda_module.h).
#include "kernels/cuda_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <mutex>
#include <string>

#include "util/error.h"

namespace spmd::cuda {

namespace {

const Module* g_module = nullptr;
std::mutex g_mutex;

#ifdef SPMD_CUDA_MODULE_PATH
// Where the module is: beside an installed program (PREFIX/bin/spmd-train -> PREFIX/lib/, as
// Dockerfile.cuda installs it), else where the build put it.
std::string module_path() {
  char exe[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir.erase(dir.find_last_of('/') + 1);
    const std::string installed = dir + "../lib/libspmd_cuda.so";
    if (access(installed.c_str(), F_OK) == 0) return installed;
  }
  return SPMD_CUDA_MODULE_PATH;
}
#endif

const Module& load() {
#ifdef SPMD_CUDA_MODULE_PATH
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (g_module) return *g_module;
  const std::string path = module_path();
  // RTLD_GLOBAL: libtorch_cuda and NCCL as if linked into the program.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* why = dlerror();
    throw RuntimeError(fmt::format("cannot load this build's CUDA module {} ({}); rebuild with bash scripts/build",
                                   path, why ? why : "no reason given"));
  }
  using Entry = const Module* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "spmd_cuda_module"));
  if (!entry) throw RuntimeError(fmt::format("{} has no spmd_cuda_module entry", path));
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
