// Packing examples into windows (see sft_pack.h).
#include "chat/sft_pack.h"

#include "util/error.h"

namespace spmd {

SftPacker::SftPacker(int64_t block_size, uint32_t document_end, bool pack)
    : block_size_(block_size), document_end_(document_end), pack_(pack) {
  SPMD_CHECK(block_size >= 2, "--block-size must be at least 2, got {}", block_size);
}

void SftPacker::pad_open_window() {
  if (used() == 0) return;
  const size_t rest = static_cast<size_t>(block_size_ - used());
  ids_.insert(ids_.end(), rest, document_end_);
  targets_.insert(targets_.end(), rest, 0);
}

void SftPacker::add(const SftExample& example) {
  const auto n = static_cast<int64_t>(example.ids.size());
  SPMD_ASSERT(n >= 1 && n <= block_size_, "SftPacker::add: an example of {} tokens for windows of {}", n, block_size_);
  if (used() > 0) {
    const bool needs_separator = ids_.back() != document_end_;
    if (!pack_ || used() + (needs_separator ? 1 : 0) + n > block_size_) {
      pad_open_window();
    } else if (needs_separator) {
      ids_.push_back(document_end_);
      targets_.push_back(0);
    }
  }
  ids_.insert(ids_.end(), example.ids.begin(), example.ids.end());
  targets_.insert(targets_.end(), example.targets.begin(), example.targets.end());
}

void SftPacker::finish() { pad_open_window(); }

}  // namespace spmd
