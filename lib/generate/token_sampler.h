// Choosing the next token from logits: greedy, or a draw from the tempered, top-k-cut softmax.
// The draw is the counter-based uniform of (seed, position), so equal logits give the same token
// on every rank and every mesh.
#pragma once
#include <cstdint>

#include <ATen/ATen.h>

namespace spmd {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (argmax, the lowest id among equals)
  int64_t top_k = 0;         // keep the k largest logits (ties: lower ids first); 0: all
  uint64_t seed = 1337;
};

// logits: (vocab,) of any float dtype and device. `position`: the new token's index in the text.
int64_t choose_token(const at::Tensor& logits, const SamplingOptions& options, int64_t position);

}  // namespace spmd
