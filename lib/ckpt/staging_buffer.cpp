// The reusable host staging buffer of asynchronous checkpoints.
#include "ckpt/staging_buffer.h"

#include <ATen/core/grad_mode.h>

#include "comm/host_copies.h"
#include "util/error.h"

namespace spmd {

StagedTensors StagingBuffer::stage(const std::vector<NamedTensor>& live) {
  if (copies_.empty()) {
    for (const auto& t : live) {
      copies_.push_back({t.name, host_buffer(t.tensor.sizes(), t.tensor.scalar_type(), t.tensor.device())});
      bytes_ += static_cast<int64_t>(t.tensor.nbytes());
    }
  }
  SPMD_ASSERT(copies_.size() == live.size(), "staging {} tensors into a buffer made for {}", live.size(), copies_.size());
  at::NoGradGuard no_grad;
  QueuedCopies queued;
  for (size_t i = 0; i < live.size(); ++i) {
    SPMD_ASSERT(copies_[i].name == live[i].name && copies_[i].tensor.sizes() == live[i].tensor.sizes(),
                "staging '{}' into the buffer of '{}'", live[i].name, copies_[i].name);
    queued.copy(copies_[i].tensor, live[i].tensor);
  }
  queued.wait();  // one wait for all of them: the copies are complete when stage() returns
  return {copies_, queued.copies(), queued.waits()};
}

}  // namespace spmd
