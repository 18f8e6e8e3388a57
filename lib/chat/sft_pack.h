// Examples packed into windows of block_size tokens, none straddling two: an example goes into
// the open window when it fits there after a separator (the document-end id, not a target,
// unless the previous example already ends with it), else it starts a new window; the rest of a
// window is padded with the document-end id, never a target. Unpacked: one example per window.
// The document mask (data.document_mask, the document-end id ending each document) then keeps
// every example to itself: no attention across examples, positions from 0 in each.
#pragma once
#include <cstdint>
#include <vector>

#include "chat/sft_examples.h"

namespace spmd {

class SftPacker {
 public:
  SftPacker(int64_t block_size, uint32_t document_end, bool pack);

  // An example of at most block_size tokens.
  void add(const SftExample& example);
  // Pads the open window; after it, windows() is final.
  void finish();

  int64_t windows() const { return static_cast<int64_t>(ids_.size()) / block_size_; }
  // Window w's ids or targets: [w * block_size, (w + 1) * block_size).
  const std::vector<uint32_t>& ids() const { return ids_; }
  const std::vector<uint8_t>& targets() const { return targets_; }

 private:
  void pad_open_window();
  int64_t used() const { return static_cast<int64_t>(ids_.size()) % block_size_; }

  int64_t block_size_;
  uint32_t document_end_;
  bool pack_;
  std::vector<uint32_t> ids_;
  std::vector<uint8_t> targets_;
};

}  // namespace spmd
