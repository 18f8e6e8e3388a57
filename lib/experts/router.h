// The router of a sparse layer (docs/experts.md): softmax in float32 over one logit per expert,
// the top k with ties going to the lower expert index, optionally renormalised. The same choice
// on every mesh, since it depends on nothing but the token's logits.
#pragma once
#include <cstdint>

#include <ATen/ATen.h>

namespace spmd {

struct Routing {
  at::Tensor probs;    // (N, E) float32: the softmax over every expert (the balancing loss reads it)
  at::Tensor choice;   // (N, k) int64: the experts each token reaches, best first
  at::Tensor weights;  // (N, k) float32: their mixing weights
};

// logits (N, E) in any float dtype. choice_bias: undefined, or (E,) float32 added to the
// probabilities for the choice only (auxiliary-loss-free balancing); the weights stay the
// probabilities of the chosen experts.
Routing route_tokens(const at::Tensor& logits, int64_t k, bool normalize, const at::Tensor& choice_bias = {});

}  // namespace spmd
