// The message of the UsageError a callable throws, for tests of error messages.
#pragma once
#include <string>

#include <doctest/doctest.h>

#include "util/error.h"

namespace spmd::test {

// Runs f and returns the UsageError's message; fails the test if f throws none.
template <class F>
std::string usage_error_of(F&& f) {
  try {
    f();
  } catch (const spmd::UsageError& e) {
    return e.what();
  }
  FAIL("expected a UsageError");
  return "";
}

}  // namespace spmd::test
