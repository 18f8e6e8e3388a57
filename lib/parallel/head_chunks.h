// How many rows the LM head and its loss take at a time (parallel/head_loss.h). Free of libtorch
// so that the memory estimate, which the torch-free fuzz build compiles, can use it.
#pragma once
#include <algorithm>
#include <cstdint>

namespace spmd {

// Rows per chunk by default: as many as make kHeadChunkBytes of float32 logits of `vocab_local`
// columns (a multiple of 8, at least 8). 32 MiB is ~160 rows of GPT-2's 50304 columns: each chunk's
// products are still wide matrices (N = the vocabulary) and its logits stay in cache-sized pieces.
constexpr int64_t kHeadChunkBytes = int64_t{32} << 20;

inline int64_t head_chunk_rows(int64_t vocab_local) {
  const int64_t rows = kHeadChunkBytes / (std::max<int64_t>(vocab_local, 1) * static_cast<int64_t>(sizeof(float)));
  return std::max<int64_t>(8, rows / 8 * 8);
}

}  // namespace spmd
