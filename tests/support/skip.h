// The one skip convention of the doctest binaries: a case that cannot run here, for a stated reason
// it detected, calls SPMD_SKIP(reason). That prints "SKIP: <reason>", ends the case, and makes the
// binary exit 77, which ctest reports as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt), never
// as passed. A failed check in the same run still fails it.
#pragma once
#include <string>

namespace spmd::test {

void mark_skipped(const std::string& reason);

}  // namespace spmd::test

#define SPMD_SKIP(reason)                 \
  do {                                    \
    ::spmd::test::mark_skipped(reason);   \
    return;                               \
  } while (0)
