// Differences between libtorch 1.13 (Debian) and 2.x (PyTorch wheels) live here and only here.
#pragma once
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace spmd::compat {

// In 1.13 a backend such as ProcessGroupGloo is a c10d::ProcessGroup; in 2.x it is a c10d::Backend.
#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

}  // namespace spmd::compat
