// GPU kernels compiled at run time with NVRTC, so that a GPU host needs no nvcc: the torch wheel
// ships libnvrtc (nvidia/cu13/lib) beside the CUDA runtime, and the project compiles no .cu files.
// libnvrtc is opened on first use (dlopen), never linked: a process that draws no GPU kernel does
// not load it. Built only with CUDA (SPMD_WITH_CUDA). Every failure is a RuntimeError (exit 1)
// that says what failed: no libnvrtc, the compile log, the driver's error.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace spmd::kernels::cuda {

// One translation unit's text, and the headers it #includes by name ("kernels/counter_hash.h").
struct NvrtcSource {
  std::string name;  // for the compile log: "counter_dropout.cuh"
  std::string text;
  std::vector<std::pair<std::string, std::string>> headers;  // include name, text
};

// Why libnvrtc cannot be opened here ("" when it can): for a test that skips where it cannot.
std::string nvrtc_unavailable();

// The NVRTC architecture option for a GPU of compute capability major.minor: "sm_XY", a binary
// for it, where this NVRTC knows XY; else "compute_XY" for the highest XY it knows below (an NVRTC
// older than the GPU), PTX that the driver compiles on load. RuntimeError where it knows none.
std::string nvrtc_architecture(int major, int minor);

// Compiles `source` for `architecture` ("sm_90": a CUBIN; "compute_80": PTX); the image's bytes.
std::string nvrtc_compile(const NvrtcSource& source, const std::string& architecture);

// A kernel of a compiled image loaded into the process (cudaLibrary_t, usable on every device):
// the handle cudaLaunchKernel takes. Loaded images stay for the process's lifetime.
const void* load_kernel(const std::string& image, const std::string& kernel_name);

}  // namespace spmd::kernels::cuda
