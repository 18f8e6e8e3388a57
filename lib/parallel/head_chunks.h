// How many rows the LM head and its loss take at a time (parallel/head_loss.h). Free of libtorch
// so that the memory estimate, which the torch-free fuzz build compiles, can use it.
#pragma once
#include <algorithm>
#include <cstdint>

namespace spmd {

// On a CPU a chunk is 32 MiB of float32 logits, ~160 rows of GPT-2's 50304 columns: each chunk's
// products are still wide matrices (N = the vocabulary) and its logits stay in cache-sized pieces.
// On a GPU it is 1 GiB (~5300 rows), and never more than half the rows: every chunk adds its part
// of the table's gradient into the float32 accumulator, a pass over the whole (V, C) table, so
// there the number of chunks counts, not the cache (measured on an H200, GPT-2 124M at 32 x 1024
// tokens: 205 chunks cost 58 of the step's 219 ms in those adds; docs/gpu.md).
constexpr int64_t kHeadChunkBytesCpu = int64_t{32} << 20;
constexpr int64_t kHeadChunkBytesGpu = int64_t{1} << 30;

// Rows per chunk by default, of `total_rows` rows of `vocab_local` logit columns: a multiple of 8,
// at least 8.
inline int64_t head_chunk_rows(int64_t vocab_local, int64_t total_rows, bool gpu) {
  const int64_t bytes = gpu ? kHeadChunkBytesGpu : kHeadChunkBytesCpu;
  int64_t rows = bytes / (std::max<int64_t>(vocab_local, 1) * static_cast<int64_t>(sizeof(float)));
  if (gpu) rows = std::min(rows, (total_rows + 1) / 2);
  return std::max<int64_t>(8, rows / 8 * 8);
}

}  // namespace spmd
