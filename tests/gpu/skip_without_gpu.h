// The GPU tests' guard. Where no GPU is visible a case skips (SPMD_SKIP's convention: "SKIP: no
// GPU", exit 77, reported skipped by ctest, never passed). Where a GPU is visible (/dev/nvidia0) but
// the binary has no CUDA, the case FAILS: that build would train on the CPU and skip every GPU check.
#pragma once
#include <filesystem>

#include <doctest/doctest.h>

#include "comm/backend.h"
#include "skip.h"

namespace spmd::test {

// True when the case must stop here (skipped, or failed for a CPU-only build on a GPU host).
inline bool skip_without_gpu() {
  if (spmd::built_with_cuda() && spmd::visible_gpus() > 0) return false;
  if (!spmd::built_with_cuda() && std::filesystem::exists("/dev/nvidia0")) {
    FAIL_CHECK("a GPU is visible (/dev/nvidia0) but this binary was built without CUDA");
    return true;
  }
  mark_skipped(spmd::built_with_cuda() ? "no GPU (no GPU visible)" : "no GPU (built without CUDA)");
  return true;
}

}  // namespace spmd::test
