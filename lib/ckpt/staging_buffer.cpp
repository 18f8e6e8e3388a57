// The reusable host staging buffer of asynchronous checkpoints.
#include "ckpt/staging_buffer.h"

#include <ATen/core/grad_mode.h>

#include "util/error.h"

namespace spmd {

const std::vector<NamedTensor>& StagingBuffer::stage(const std::vector<NamedTensor>& live) {
  if (copies_.empty()) {
    for (const auto& t : live) {
      const bool pin = !t.tensor.device().is_cpu();
      copies_.push_back({t.name, at::empty(t.tensor.sizes(), at::TensorOptions().dtype(t.tensor.scalar_type()).pinned_memory(pin))});
      bytes_ += static_cast<int64_t>(t.tensor.nbytes());
    }
  }
  SPMD_ASSERT(copies_.size() == live.size(), "staging {} tensors into a buffer made for {}", live.size(), copies_.size());
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < live.size(); ++i) {
    SPMD_ASSERT(copies_[i].name == live[i].name && copies_[i].tensor.sizes() == live[i].tensor.sizes(),
                "staging '{}' into the buffer of '{}'", live[i].name, copies_[i].name);
    copies_[i].tensor.copy_(live[i].tensor);  // blocking: the copy is complete when stage() returns
  }
  return copies_;
}

}  // namespace spmd
