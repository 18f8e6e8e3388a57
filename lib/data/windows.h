// The training examples of a token dataset: windows of block_size+1 tokens starting every `stride`
// tokens (default block_size: non-overlapping; 1: every offset, as nanoGPT's random sampling
// covers), inputs = window[0:T], targets = window[1:T+1], never crossing a file boundary, so
// llm.c shards (whole documents) stay separate. Windows are numbered file by file.
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

  // Writes window `w` as inputs[0:T] and targets[0:T], widened to int64.
  void copy(int64_t w, int64_t* inputs, int64_t* targets) const;

 private:
  const TokenDataset* data_;
  int64_t block_size_;
  int64_t stride_;
  std::vector<int64_t> first_window_;  // first window id of each file, then the total
};

}  // namespace spmd
