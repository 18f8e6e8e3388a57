// Crossings between a rank's device and host memory that do not wait tensor by tensor: host
// buffers are pinned (page-locked) when the device is a GPU, every copy is queued on the current
// stream (non_blocking), and one wait covers them all. On the CPU there is nothing to cross: the
// buffers are ordinary memory, the copies plain, and nothing waits.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace spmd {

// Host memory for copies of tensors that live on `device`: pinned when it is a GPU (a copy from
// or to pinned memory can be asynchronous), ordinary memory on the CPU.
at::Tensor host_buffer(at::IntArrayRef shape, at::ScalarType dtype, c10::Device device);

// Copies queued one after another, then waited for once.
class QueuedCopies {
 public:
  // Queues dst.copy_(src) without waiting (non_blocking). dst must stay alive and untouched until
  // wait() returns (src too, when it is host memory).
  void copy(at::Tensor& dst, const at::Tensor& src);
  // Waits once until every queued copy is done: one event on the current stream of each device a
  // copy touched (in practice the rank's one GPU); nothing on the CPU, whose copies are done.
  void wait();

  int64_t copies() const { return copies_; }   // queued so far
  int64_t waits() const { return waits_; }     // device waits wait() made (0 on the CPU)

 private:
  std::vector<c10::Device> devices_;  // the non-CPU devices copies touched since the last wait
  int64_t copies_ = 0, waits_ = 0;
};

}  // namespace spmd
