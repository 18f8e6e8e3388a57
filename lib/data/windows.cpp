// Window numbering and copying (see windows.h).
#include "data/windows.h"

#include <algorithm>

#include "util/error.h"

namespace spmd {
namespace {

// Typed per width, so each loop is a plain widening copy the compiler vectorizes.
template <class Id>
void widen_window(const Id* src, int64_t T, int64_t* inputs, int64_t* targets) {
  for (int64_t t = 0; t < T; ++t) inputs[t] = src[t];
  for (int64_t t = 0; t < T; ++t) targets[t] = src[t + 1];
}

}  // namespace

WindowTable::WindowTable(const TokenDataset& data, int64_t block_size, int64_t stride)
    : data_(&data), block_size_(block_size), stride_(stride == 0 ? block_size : stride) {
  SPMD_CHECK(block_size >= 1, "block_size must be positive, got {}", block_size);
  SPMD_CHECK(stride_ >= 1 && stride_ <= block_size, "window stride {} not in [1, block_size = {}]", stride_, block_size);
  SPMD_CHECK(!data.files().empty(), "{}: dataset holds no files", data.spec());
  first_window_.push_back(0);
  for (const auto& file : data.files()) {
    // (Not `>= block_size + 1`: that overflows for block_size = INT64_MAX.)
    SPMD_CHECK(file.num_tokens() > block_size,
               "{}: {} tokens is shorter than one sequence (block_size + 1 = {} tokens)",
               file.path(), file.num_tokens(), static_cast<uint64_t>(block_size) + 1);
    // Starts 0, S, 2S, ... while start + T + 1 <= n.
    first_window_.push_back(first_window_.back() + (file.num_tokens() - 1 - block_size) / stride_ + 1);
  }
}

void WindowTable::copy(int64_t w, int64_t* inputs, int64_t* targets) const {
  SPMD_ASSERT(w >= 0 && w < size(), "window {} out of range [0, {})", w, size());
  // The file whose window range holds w: the last first_window_ <= w.
  auto it = std::upper_bound(first_window_.begin(), first_window_.end(), w);
  size_t f = static_cast<size_t>(it - first_window_.begin()) - 1;
  const int64_t start = (w - first_window_[f]) * stride_;
  // One branch per window on the file's width (files of one dataset may differ).
  data_->files()[f].visit([&](const auto* tokens) { widen_window(tokens + start, block_size_, inputs, targets); });
}

}  // namespace spmd
