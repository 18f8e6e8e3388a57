// Device-side phase timing with c10::Event (CUDA events with timing on, through c10's
// device-generic interface: no CUDA headers here).
#include "train/device_phases.h"

#include <c10/core/impl/VirtualGuardImpl.h>

namespace spmd {

void DevicePhases::begin(c10::Device device) {
  device_ = device;
  marks_.clear();
  mark();
}

void DevicePhases::mark() {
  if (!device_.is_cuda()) return;
  const c10::impl::VirtualGuardImpl guard(device_.type());
  marks_.emplace_back(device_.type(), c10::EventFlag::BACKEND_DEFAULT);  // BACKEND_DEFAULT: timing on
  marks_.back().record(guard.getStream(device_));
}

std::vector<double> DevicePhases::elapsed_ms() const {
  std::vector<double> ms;
  for (size_t i = 1; i < marks_.size(); ++i) ms.push_back(marks_[i - 1].elapsedTime(marks_[i]));
  return ms;
}

}  // namespace spmd
