// Host copies of the tensors a rank checkpoints, allocated at the first save and reused by every
// later one, so host memory stays flat however many saves a run makes. Pinned memory when the
// tensors live on a GPU (a faster device-to-host copy).
#pragma once
#include <cstdint>
#include <vector>

#include "ckpt/safetensors.h"

namespace spmd {

class StagingBuffer {
 public:
  // Copies `live` into the buffer (allocating it at the first call) and returns the copies, under
  // the same names. Every call must pass the same names and shapes.
  const std::vector<NamedTensor>& stage(const std::vector<NamedTensor>& live);
  int64_t bytes() const { return bytes_; }

 private:
  std::vector<NamedTensor> copies_;
  int64_t bytes_ = 0;
};

}  // namespace spmd
