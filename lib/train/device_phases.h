// A step's phases as the device ran them. On CUDA the step only queues its work, so the host
// clock between phases measures the queueing; events recorded on the stream between the phases
// measure the device's time. On the CPU the host clock is the device's: nothing is recorded.
#pragma once
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/Event.h>

namespace spmd {

class DevicePhases {
 public:
  // Starts a step: forgets the previous marks. Records only on a device with timing events (CUDA).
  void begin(c10::Device device);
  void mark();  // an event here on the device's current stream: the end of one phase, the start of the next
  // Milliseconds between consecutive marks, once the device has passed the last (after a
  // synchronize); empty where nothing was recorded.
  std::vector<double> elapsed_ms() const;

 private:
  c10::Device device_{c10::kCPU};
  std::vector<c10::Event> marks_;
};

}  // namespace spmd
