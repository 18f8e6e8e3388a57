// GPT-2's forward pass, written once against ModelOps: no communication, logical names only.
#pragma once
#include <ATen/ATen.h>

#include "config/config.h"
#include "model/model.h"

namespace spmd {

class Gpt2 : public Model {
 public:
  explicit Gpt2(const ModelConfig& config) : Model(config) {}

  // Token + position embeddings; blocks; final LayerNorm and the tied head (model/model.h).
  at::Tensor embed(const at::Tensor& idx, ModelOps& ops, bool training, int64_t first_position = 0,
                   const at::Tensor& document_starts = at::Tensor()) const override;

 private:
  // sum = x + delta (delta undefined: x) and the LayerNorm `prefix` of it (ModelOps::add_layer_norm).
  ModelOps::AddNormed add_layer_norm(const at::Tensor& x, const at::Tensor& delta, const std::string& prefix,
                                     ModelOps& ops) const;
  at::Tensor block(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training, KvCache* cache,
                   const at::Tensor& document_starts) const override;
  at::Tensor final_norm(const at::Tensor& x, ModelOps& ops) const override;
  at::Tensor attention(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training, KvCache* cache,
                       const at::Tensor& document_starts) const;
  at::Tensor cached_attention(const at::Tensor& qkv, int64_t layer, ModelOps& ops, KvCache& cache) const;
  at::Tensor mlp(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training) const;
};

}  // namespace spmd
