#include "device_profile.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>

namespace spmd::bench {

DeviceProfile profile_device_steps(const std::string& trace_path, int steps, const std::function<void()>& step) {
  namespace impl = torch::profiler::impl;
  const std::set<impl::ActivityType> activities{impl::ActivityType::CPU, impl::ActivityType::CUDA};
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < steps; ++k) step();
  DeviceProfile profile;
  profile.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  profile.steps = steps;
  const std::unique_ptr<torch::autograd::profiler::ProfilerResult> result = torch::autograd::profiler::disableProfiler();
  if (!trace_path.empty()) result->save(trace_path);
  std::map<std::string, KernelTime> by_name;
  for (const auto& event : result->events()) {
    if (event.deviceType() != c10::DeviceType::CUDA) continue;  // CPU ops and CUDA runtime calls
    KernelTime& k = by_name[event.name()];
    k.name = event.name();
    k.ms += static_cast<double>(event.durationNs()) / 1e6;
    ++k.calls;
  }
  for (auto& [name, k] : by_name) {
    profile.device_ms += k.ms;
    profile.kernels.push_back(std::move(k));
  }
  std::sort(profile.kernels.begin(), profile.kernels.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });
  return profile;
}

void print_device_profile(const DeviceProfile& p, size_t top) {
  const double per_step = 1.0 / std::max(p.steps, 1);
  fmt::print("  device profile     {} steps: device busy {:.2f} of {:.2f} ms a step ({:.0f}%), {} kernel names; "
             "the longest:\n", p.steps, p.device_ms * per_step, p.wall_ms * per_step,
             p.wall_ms > 0 ? 100.0 * p.device_ms / p.wall_ms : 0.0, p.kernels.size());
  for (size_t i = 0; i < std::min(top, p.kernels.size()); ++i) {
    const KernelTime& k = p.kernels[i];
    fmt::print("    {:7.2f} ms {:5.1f}% {:5} calls  {:.110}\n", k.ms * per_step,
               p.device_ms > 0 ? 100.0 * k.ms / p.device_ms : 0.0, k.calls / std::max(p.steps, 1), k.name);
  }
}

nlohmann::json device_profile_json(const DeviceProfile& p, size_t top) {
  const double per_step = 1.0 / std::max(p.steps, 1);
  nlohmann::json kernels = nlohmann::json::array();
  for (size_t i = 0; i < std::min(top, p.kernels.size()); ++i)
    kernels.push_back({{"name", p.kernels[i].name}, {"ms_per_step", p.kernels[i].ms * per_step},
                       {"calls_per_step", static_cast<double>(p.kernels[i].calls) * per_step}});
  return {{"steps", p.steps}, {"device_busy_ms_per_step", p.device_ms * per_step},
          {"wall_ms_per_step", p.wall_ms * per_step}, {"kernels", kernels}};
}

}  // namespace spmd::bench
