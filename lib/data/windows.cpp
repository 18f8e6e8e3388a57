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

// Targets whose token is not marked as one become -1.
void mask_window_targets(const unsigned char* marks, int64_t T, int64_t* targets) {
  for (int64_t t = 0; t < T; ++t)
    if (marks[t + 1] == 0) targets[t] = -1;
}

}  // namespace

WindowTable::WindowTable(const TokenDataset& data, int64_t block_size, int64_t stride)
    : data_(&data), block_size_(block_size), stride_(stride == 0 ? block_size : stride) {
  SPMD_CHECK(block_size >= 1, "block_size must be positive, got {}", block_size);
  SPMD_CHECK(stride_ >= 1 && stride_ <= block_size, "window stride {} not in [1, block_size = {}]", stride_, block_size);
  SPMD_CHECK(!data.files().empty(), "{}: dataset holds no files", data.spec());
  SPMD_CHECK(!data.has_targets() || (block_size == data.packed_block_size() && stride_ == block_size),
             "{}: fine-tuning data packed into windows of {} tokens (its meta.json's fine_tuning.block_size): set "
             "model.block_size: {} and leave data.window_stride unset (got block_size {}, stride {})",
             data.spec(), data.packed_block_size(), data.packed_block_size(), block_size, stride_);
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

std::pair<size_t, int64_t> WindowTable::locate(int64_t w) const {
  SPMD_ASSERT(w >= 0 && w < size(), "window {} out of range [0, {})", w, size());
  // The file whose window range holds w: the last first_window_ <= w.
  auto it = std::upper_bound(first_window_.begin(), first_window_.end(), w);
  const size_t f = static_cast<size_t>(it - first_window_.begin()) - 1;
  return {f, (w - first_window_[f]) * stride_};
}

void WindowTable::copy(int64_t w, int64_t* inputs, int64_t* targets) const {
  const auto [f, start] = locate(w);
  // One branch per window on the file's width (files of one dataset may differ).
  data_->files()[f].visit([&](const auto* tokens) { widen_window(tokens + start, block_size_, inputs, targets); });
  if (const unsigned char* marks = data_->targets(f)) mask_window_targets(marks + start, block_size_, targets);
}

int64_t WindowTable::count_targets(int64_t w) const {
  const auto [f, start] = locate(w);
  const unsigned char* marks = data_->targets(f);
  if (marks == nullptr) return block_size_;
  int64_t n = 0;
  for (int64_t t = 1; t <= block_size_; ++t) n += marks[start + t] != 0;
  return n;
}

}  // namespace spmd
