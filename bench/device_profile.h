// Where a step's device time goes: the kernels a GPU ran over a few steps, from libtorch's Kineto
// profiler (CUPTI), summed by kernel name, with a chrome://tracing file of the same steps.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace spmd::bench {

struct KernelTime {
  std::string name;
  double ms = 0;     // summed over the profiled steps
  int64_t calls = 0;
};

struct DeviceProfile {
  std::vector<KernelTime> kernels;  // the device's kernels, copies and fills, longest total first
  double device_ms = 0;             // their sum: the time the device was busy (no overlap on one stream)
  double wall_ms = 0;               // the profiled steps' wall time
  int steps = 0;
};

// Runs `steps` (which must end synchronized) under the profiler with CPU and CUDA activities,
// writes the trace to trace_path and returns the device's kernels. CUDA builds only.
DeviceProfile profile_device_steps(const std::string& trace_path, int steps, const std::function<void()>& step);

void print_device_profile(const DeviceProfile& profile, size_t top);
nlohmann::json device_profile_json(const DeviceProfile& profile, size_t top);

}  // namespace spmd::bench
