// Queued host-device copies with one wait (host_copies.h). Device-generic: the wait is a c10::Event
// recorded on the device's current stream (CUDA's, where the copies were queued).
#include "comm/host_copies.h"

#include <algorithm>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace spmd {

at::Tensor host_buffer(at::IntArrayRef shape, at::ScalarType dtype, c10::Device device) {
  return at::empty(shape, at::TensorOptions().dtype(dtype).pinned_memory(!device.is_cpu()));
}

void QueuedCopies::copy(at::Tensor& dst, const at::Tensor& src) {
  dst.copy_(src, /*non_blocking=*/true);  // from or to pinned memory: queued on the current stream
  ++copies_;
  for (const c10::Device d : {dst.device(), src.device()})
    if (!d.is_cpu() && std::find(devices_.begin(), devices_.end(), d) == devices_.end()) devices_.push_back(d);
}

void QueuedCopies::wait() {
  for (const c10::Device d : devices_) {
    const c10::impl::VirtualGuardImpl guard(d.type());
    c10::Event done(d.type());
    done.record(guard.getStream(d));  // after every copy queued on that stream
    done.synchronize();
    ++waits_;
  }
  devices_.clear();
}

}  // namespace spmd
