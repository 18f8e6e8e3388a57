// The test runner's own convention (tests/support/doctest_main.cpp, skip.h), exercised by
// tests/scripts/check_test_discovery.py: with SPMD_SELF_TEST_SKIP set this case skips and its run
// must exit 77; without it, it checks that the skip flag is off.
#include <doctest/doctest.h>

#include <cstdlib>

#include "skip.h"

TEST_CASE("suite: a case that skips makes its run exit 77") {
  if (std::getenv("SPMD_SELF_TEST_SKIP") != nullptr) SPMD_SKIP("asked to by SPMD_SELF_TEST_SKIP (the runner's self-test)");
  CHECK(std::getenv("SPMD_SELF_TEST_SKIP") == nullptr);
}
