// Host copies of the tensors a rank checkpoints, allocated at the first save and reused by every
// later one, so host memory stays flat however many saves a run makes. Pinned memory when the
// tensors live on a GPU: every device-to-host copy is queued at once and one wait covers them all.
#pragma once
#include <cstdint>
#include <vector>

#include "ckpt/safetensors.h"

namespace spmd {

// What one stage() did: the host copies, and how the copying went.
struct StagedTensors {
  std::vector<NamedTensor> tensors;  // the buffer's copies, under the live tensors' names
  int64_t copies = 0;                // tensors copied (every live one)
  int64_t device_waits = 0;          // waits on the device: 1 for any number of GPU tensors, 0 on the CPU
};

class StagingBuffer {
 public:
  // Copies `live` into the buffer (allocating it at the first call); the copies are complete when
  // it returns. Every call must pass the same names and shapes.
  StagedTensors stage(const std::vector<NamedTensor>& live);
  int64_t bytes() const { return bytes_; }

 private:
  std::vector<NamedTensor> copies_;
  int64_t bytes_ = 0;
};

}  // namespace spmd
