// The Llama family's sparse MLP (Qwen3-MoE, Mixtral, Qwen2-MoE; docs/experts.md): a router to
// one logit per expert, the top k experts per token (experts/router.h), their SwiGLU outputs
// mixed by the routing weights, and optionally a shared expert behind a sigmoid gate.
#pragma once
#include <cstdint>

#include <ATen/ATen.h>

#include "config/config.h"
#include "model/model_ops.h"

namespace spmd {

// x (B, T, C) the normed residual stream -> (B, T, C) float32, for sparse layer `layer`.
at::Tensor sparse_mlp(const ModelConfig& config, const at::Tensor& x, int64_t layer, ModelOps& ops);

}  // namespace spmd
