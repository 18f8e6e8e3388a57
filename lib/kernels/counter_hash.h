// The counter-based generator's per-element math, the one definition that both the CPU loop
// (parallel/counter_rng.cpp) and the GPU kernel (kernels/cuda/counter_dropout.cuh, compiled at run
// time by NVRTC, which is handed this file's text) use, so that their bits agree by construction.
// Written in the common subset of C++17 and CUDA: under NVRTC (__CUDACC_RTC__) no includes.
#pragma once

#ifdef __CUDACC_RTC__
typedef unsigned long long uint64_t;
typedef long long int64_t;
#define SPMD_HOST_DEVICE __device__ __forceinline__
#else
#include <cstdint>
#define SPMD_HOST_DEVICE inline
#endif

namespace spmd {
namespace counter_hash {

SPMD_HOST_DEVICE uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Draw `index` of the stream whose key is `key` (the key depends on seed and stream only).
SPMD_HOST_DEVICE uint64_t draw(uint64_t key, uint64_t index) { return splitmix64(key ^ index); }

// One element of a dropout mask: keep_scale when the draw's uniform in (0, 1], ((bits >> 11) + 1)
// / 2^53, exceeds p, else 0. Compared exactly as ((bits >> 11) + 1) > p 2^53 (`p_scaled`): both
// sides are exact doubles.
SPMD_HOST_DEVICE float dropout_element(uint64_t key, uint64_t index, double p_scaled, float keep_scale) {
  return static_cast<double>((draw(key, index) >> 11) + 1) > p_scaled ? keep_scale : 0.0f;
}

// A block of a row-major global array: its local shape, the global array's strides (elements) and
// the block's offset in it, dimension by dimension (rank 0 is one element). Passed by value to the
// GPU kernel, so plain fixed-size fields.
constexpr int kMaxBlockRank = 6;
struct BlockIndex {
  int64_t shape[kMaxBlockRank];
  int64_t global_stride[kMaxBlockRank];
  int64_t offset[kMaxBlockRank];
  int rank;
};

// The global index of the block's element `local` (its row-major index within the block, below
// the block's element count): a division and a remainder per dimension but the first.
SPMD_HOST_DEVICE uint64_t global_index(const BlockIndex& block, uint64_t local) {
  uint64_t global = 0;
#ifdef __CUDACC_RTC__
#pragma unroll
#endif
  for (int d = kMaxBlockRank - 1; d >= 1; --d) {
    if (d < block.rank) {  // a fixed trip count: the kernel keeps the fields in registers
      const uint64_t n = static_cast<uint64_t>(block.shape[d]);
      global += (local % n + static_cast<uint64_t>(block.offset[d])) * static_cast<uint64_t>(block.global_stride[d]);
      local /= n;
    }
  }
  if (block.rank > 0)  // what is left of `local` is the first dimension's coordinate
    global += (local + static_cast<uint64_t>(block.offset[0])) * static_cast<uint64_t>(block.global_stride[0]);
  return global;
}

// The same block with fewer dimensions, so global_index divides less: a dimension that the block
// spans whole (all of it, from 0) merges into the one before it, whose elements are then
// contiguous runs of both. A data-parallel attention mask (b, H, T, T) of (B, H, T, T) becomes
// one dimension. global_index(merged, i) == global_index(block, i) for every i.
SPMD_HOST_DEVICE BlockIndex merge_whole_dimensions(const BlockIndex& block) {
  BlockIndex merged = block;
  if (block.rank <= 1) return merged;
  int rank = 1;  // merged dimensions so far, the last one being built from block's dimension d
  for (int d = 1; d < block.rank; ++d) {
    const bool whole = block.offset[d] == 0 && block.shape[d] * block.global_stride[d] == block.global_stride[d - 1];
    if (whole) {  // dimension d joins the last merged one
      merged.shape[rank - 1] *= block.shape[d];
      merged.offset[rank - 1] *= block.global_stride[d - 1] / block.global_stride[d];
      merged.global_stride[rank - 1] = block.global_stride[d];
    } else {
      merged.shape[rank] = block.shape[d];
      merged.offset[rank] = block.offset[d];
      merged.global_stride[rank] = block.global_stride[d];
      ++rank;
    }
  }
  merged.rank = rank;
  return merged;
}

}  // namespace counter_hash
}  // namespace spmd
