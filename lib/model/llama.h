// The Llama family's forward (Llama 3, SmolLM2): RMSNorm, rotary positions, grouped-query
// attention, SwiGLU MLP, no biases, tied or untied head. Written against ModelOps like GPT-2's.
#pragma once
#include <ATen/ATen.h>

#include "model/model.h"

namespace spmd {

class Llama : public Model {
 public:
  explicit Llama(const ModelConfig& config);

  // Token embeddings (no positions: attention rotates q and k); blocks; final RMSNorm and the
  // head, wte or lm_head (model/model.h).
  at::Tensor embed(const at::Tensor& idx, ModelOps& ops, bool training, int64_t first_position = 0,
                   const at::Tensor& document_starts = at::Tensor()) const override;

 private:
  at::Tensor block(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training, KvCache* cache,
                   const at::Tensor& document_starts) const override;
  at::Tensor final_norm(const at::Tensor& x, ModelOps& ops) const override;
  at::Tensor attention(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training, KvCache* cache,
                       const at::Tensor& document_starts) const;
  at::Tensor mlp(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training) const;

  at::Tensor inverse_frequencies_;  // rope_inverse_frequencies(config)
};

}  // namespace spmd
