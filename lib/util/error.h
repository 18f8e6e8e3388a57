// Error types that decide the process exit code, and a check macro that carries context.
//   UsageError   -> exit 2: bad arguments, config, data or checkpoint (the user can fix it)
//   RuntimeError -> exit 1: something failed while running (peer lost, I/O error, ...)
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace spmd {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace spmd

// SPMD_CHECK(cond, "fmt", args...) throws UsageError with the formatted message.
#define SPMD_CHECK(cond, ...)                                      \
  do {                                                             \
    if (!(cond)) throw ::spmd::UsageError(fmt::format(__VA_ARGS__)); \
  } while (0)

// SPMD_ASSERT(cond, "fmt", args...): an internal invariant; RuntimeError with file:line.
#define SPMD_ASSERT(cond, ...)                                                        \
  do {                                                                                \
    if (!(cond))                                                                      \
      throw ::spmd::RuntimeError(fmt::format("{}:{}: internal error: ", __FILE__, __LINE__) + \
                                 fmt::format(__VA_ARGS__));                           \
  } while (0)
