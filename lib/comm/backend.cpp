// Backend selection. The CUDA/NCCL path is not built yet: it needs a libtorch with CUDA, which
// Debian's 1.13 is not (see README, "GPUs").
#include "comm/backend.h"

#include "util/error.h"

namespace spmd {

ResolvedRuntime resolve_runtime(const RuntimeConfig& runtime) {
  SPMD_CHECK(runtime.backend != "nccl",
             "runtime.backend: nccl is not available in this build (CPU libtorch with Gloo only); use gloo or auto");
  SPMD_CHECK(runtime.device != "cuda",
             "runtime.device: cuda is not available in this build (CPU libtorch); use cpu or auto");
  return {"gloo", "cpu"};
}

}  // namespace spmd
