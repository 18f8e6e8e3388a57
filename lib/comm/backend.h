// Which collective backend and device a run uses, given the config and what libtorch offers.
#pragma once
#include <string>

#include "config/config.h"

namespace spmd {

struct ResolvedRuntime {
  std::string backend;  // "gloo" (this build has no NCCL path)
  std::string device;   // "cpu"
};

// `auto` picks what this build supports; asking for NCCL or CUDA on a build without them is a
// UsageError that says so (before any process starts).
ResolvedRuntime resolve_runtime(const RuntimeConfig& runtime);

}  // namespace spmd
