// libnvrtc through dlopen; images loaded with the CUDA runtime's library API (cudaLibraryLoadData),
// which libtorch already links, so no driver-API table is needed either.
#include "kernels/cuda/nvrtc_program.h"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <type_traits>

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include "util/error.h"

namespace spmd::kernels::cuda {

namespace {
// The functions used, typed from nvrtc.h.
struct Nvrtc {
  decltype(&::nvrtcGetErrorString) get_error_string = nullptr;
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) num_supported_archs = nullptr;
  decltype(&::nvrtcGetSupportedArchs) supported_archs = nullptr;
  decltype(&::nvrtcCreateProgram) create_program = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy_program = nullptr;
  decltype(&::nvrtcCompileProgram) compile_program = nullptr;
  decltype(&::nvrtcGetProgramLogSize) program_log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) program_log = nullptr;
  decltype(&::nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&::nvrtcGetPTX) ptx = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) cubin = nullptr;
  std::string error;  // why it could not be opened, "" when it was
};

// libnvrtc.so.<major of the CUDA runtime built against>, found by the binary's run path (the
// wheel's nvidia/*/lib), else in the folder of the libcudart this process loaded (the wheel keeps
// the two together).
void* open_nvrtc(std::string& error) {
  const std::string soname = "libnvrtc.so." + std::to_string(CUDART_VERSION / 1000);
  if (void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  error = dlerror();
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetErrorString), &info) && info.dli_fname) {
    const auto beside = std::filesystem::path(info.dli_fname).parent_path() / soname;
    if (void* handle = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    error += "; " + std::string(dlerror());
  }
  return nullptr;
}

const Nvrtc& nvrtc() {
  static const Nvrtc table = [] {
    Nvrtc t;
    void* handle = open_nvrtc(t.error);
    if (!handle) return t;
    auto bind = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (!fn && t.error.empty()) t.error = std::string("libnvrtc has no ") + name;
    };
    bind(t.get_error_string, "nvrtcGetErrorString");
    bind(t.version, "nvrtcVersion");
    bind(t.num_supported_archs, "nvrtcGetNumSupportedArchs");
    bind(t.supported_archs, "nvrtcGetSupportedArchs");
    bind(t.create_program, "nvrtcCreateProgram");
    bind(t.destroy_program, "nvrtcDestroyProgram");
    bind(t.compile_program, "nvrtcCompileProgram");
    bind(t.program_log_size, "nvrtcGetProgramLogSize");
    bind(t.program_log, "nvrtcGetProgramLog");
    bind(t.ptx_size, "nvrtcGetPTXSize");
    bind(t.ptx, "nvrtcGetPTX");
    bind(t.cubin_size, "nvrtcGetCUBINSize");
    bind(t.cubin, "nvrtcGetCUBIN");
    return t;
  }();
  if (!table.error.empty())
    throw RuntimeError("cannot load NVRTC (the GPU kernels are compiled at run time; the torch wheel ships it in "
                       "nvidia/cu*/lib): " + table.error);
  return table;
}

void check_nvrtc(nvrtcResult result, const char* what) {
  if (result != NVRTC_SUCCESS)
    throw RuntimeError(fmt::format("NVRTC: {} failed: {}", what, nvrtc().get_error_string(result)));
}

void check_cuda(cudaError_t result, const std::string& what) {
  if (result != cudaSuccess) throw RuntimeError(fmt::format("CUDA: {} failed: {}", what, cudaGetErrorString(result)));
}

std::string nvrtc_version_text() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtc().version(&major, &minor), "nvrtcVersion");
  return fmt::format("{}.{}", major, minor);
}
}  // namespace

std::string nvrtc_unavailable() {
  try {
    nvrtc();
    return "";
  } catch (const RuntimeError& e) {
    return e.what();
  }
}

std::string nvrtc_architecture(int major, int minor) {
  const Nvrtc& n = nvrtc();
  int count = 0;
  check_nvrtc(n.num_supported_archs(&count), "nvrtcGetNumSupportedArchs");
  std::vector<int> known(static_cast<size_t>(count));
  check_nvrtc(n.supported_archs(known.data()), "nvrtcGetSupportedArchs");
  const int gpu = major * 10 + minor;
  if (std::find(known.begin(), known.end(), gpu) != known.end()) return fmt::format("sm_{}", gpu);
  int below = 0;
  for (int arch : known)
    if (arch <= gpu) below = std::max(below, arch);
  if (below == 0)
    throw RuntimeError(fmt::format("NVRTC {} compiles for no architecture up to the GPU's compute capability {}.{}",
                                   nvrtc_version_text(), major, minor));
  return fmt::format("compute_{}", below);
}

std::string nvrtc_compile(const NvrtcSource& source, const std::string& architecture) {
  const Nvrtc& n = nvrtc();
  std::vector<const char*> header_texts, header_names;
  for (const auto& [name, text] : source.headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(text.c_str());
  }
  nvrtcProgram program = nullptr;
  check_nvrtc(n.create_program(&program, source.text.c_str(), source.name.c_str(), static_cast<int>(header_texts.size()),
                               header_texts.data(), header_names.data()),
              "nvrtcCreateProgram");
  // Destroyed on every way out.
  const std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> owner(&program, [](nvrtcProgram* p) {
    nvrtc().destroy_program(p);
  });
  const std::string arch_option = "--gpu-architecture=" + architecture;
  const char* options[] = {arch_option.c_str(), "--std=c++17"};
  const nvrtcResult compiled = n.compile_program(program, 2, options);
  if (compiled != NVRTC_SUCCESS) {
    size_t size = 0;
    n.program_log_size(program, &size);
    std::string log(size, '\0');
    if (size > 0) n.program_log(program, log.data());
    throw RuntimeError(fmt::format("NVRTC {} could not compile {} for {}: {}\n{}", nvrtc_version_text(), source.name,
                                   architecture, n.get_error_string(compiled), log.c_str()));
  }
  const bool cubin = architecture.rfind("sm_", 0) == 0;
  size_t size = 0;
  check_nvrtc(cubin ? n.cubin_size(program, &size) : n.ptx_size(program, &size), "nvrtcGet{CUBIN,PTX}Size");
  std::string image(size, '\0');
  check_nvrtc(cubin ? n.cubin(program, image.data()) : n.ptx(program, image.data()), "nvrtcGet{CUBIN,PTX}");
  return image;
}

const void* load_kernel(const std::string& image, const std::string& kernel_name) {
  cudaLibrary_t library = nullptr;
  check_cuda(cudaLibraryLoadData(&library, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
             "loading the compiled " + kernel_name);
  cudaKernel_t kernel = nullptr;
  check_cuda(cudaLibraryGetKernel(&kernel, library, kernel_name.c_str()), "finding " + kernel_name);
  return reinterpret_cast<const void*>(kernel);
}

}  // namespace spmd::kernels::cuda
