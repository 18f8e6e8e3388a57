// The training examples of a token dataset: windows of block_size+1 tokens starting every `stride`
// tokens (default block_size: non-overlapping; 1: every offset, as nanoGPT's random sampling
// covers), inputs = window[0:T], targets = window[1:T+1], never crossing a file boundary, so
// llm.c shards (whole documents) stay separate. Windows are numbered file by file.
// Fine-tuning data (TokenDataset::has_targets) holds packed windows of exactly block_size tokens:
// the table refuses any other block_size or stride, and a target whose token is not marked as one
// (a prompt, padding, the first token of an example) is -1, which the loss skips.
#pragma once
#include <cstdint>
#include <vector>

#include "data/token_file.h"

namespace spmd {

class WindowTable {
 public:
  // Throws UsageError naming the first file shorter than one window (block_size + 1 tokens).
  // Keeps a pointer to `data`, which must outlive the table.
  // stride 0 means block_size.
  WindowTable(const TokenDataset& data, int64_t block_size, int64_t stride = 0);

  int64_t size() const { return first_window_.back(); }
  int64_t block_size() const { return block_size_; }

  // Writes window `w` as inputs[0:T] and targets[0:T], widened to int64 (-1: not a target).
  void copy(int64_t w, int64_t* inputs, int64_t* targets) const;
  // How many of window w's T targets count: T unless the data marks its targets.
  int64_t count_targets(int64_t w) const;
  bool marks_targets() const { return data_->has_targets(); }

 private:
  const TokenDataset* data_;
  int64_t block_size_;
  int64_t stride_;
  std::vector<int64_t> first_window_;  // first window id of each file, then the total

  // The file holding window w and the window's first token in it.
  std::pair<size_t, int64_t> locate(int64_t w) const;
};

}  // namespace spmd
