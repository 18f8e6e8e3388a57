// Differences between libtorch 1.13 (Debian) and 2.x (PyPI wheels) live here and only here.
// Light on purpose: headers include it; the heavy c10d headers stay in the .cpp files.
#pragma once
#include <torch/csrc/api/include/torch/version.h>

namespace c10d {
class ProcessGroup;
class Backend;
}  // namespace c10d

namespace spmd::compat {

// In 1.13 a backend such as ProcessGroupGloo is a c10d::ProcessGroup; in 2.x it is a c10d::Backend.
#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

// at::scaled_dot_product_attention exists from 2.0 on.
#if TORCH_VERSION_MAJOR >= 2
#define SPMD_HAS_SDPA 1
#else
#define SPMD_HAS_SDPA 0
#endif

}  // namespace spmd::compat
