// Milliseconds on the steady clock since a time point: the phases a step reports.
#pragma once
#include <chrono>

namespace spmd {

inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace spmd
