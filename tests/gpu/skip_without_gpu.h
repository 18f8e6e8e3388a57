// The GPU tests' guard: where no GPU is visible (or the build has no CUDA) a case prints
// "SKIP: no GPU" and returns; ctest reports it skipped (tests/CMakeLists.txt), never passed.
#pragma once
#include <doctest/doctest.h>

#include "comm/backend.h"

namespace spmd::test {

inline bool skip_without_gpu() {
  if (spmd::built_with_cuda() && spmd::visible_gpus() > 0) return false;
  MESSAGE("SKIP: no GPU (" << (spmd::built_with_cuda() ? "no GPU visible" : "built without CUDA") << ")");
  return true;
}

}  // namespace spmd::test
