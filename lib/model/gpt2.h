// GPT-2's forward pass, written once against ModelOps: no communication, logical names only.
#pragma once
#include <ATen/ATen.h>

#include "config/config.h"
#include "model/model_ops.h"

namespace spmd {

class Gpt2 {
 public:
  explicit Gpt2(const ModelConfig& config) : config_(config) {}

  // Mean cross-entropy over this rank's rows. idx, targets: (B, T) int64 token ids.
  at::Tensor loss(const at::Tensor& idx, const at::Tensor& targets, ModelOps& ops, bool training) const;

 private:
  at::Tensor layer_norm(const at::Tensor& x, const std::string& prefix, ModelOps& ops) const;
  at::Tensor attention(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training) const;
  at::Tensor mlp(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training) const;

  ModelConfig config_;
};

}  // namespace spmd
