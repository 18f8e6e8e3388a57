// Timing helpers shared by the micro-benchmarks: one call's wall time, and the median of many.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace spmd::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline double ms_of(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace spmd::bench
