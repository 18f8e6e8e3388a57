// GPT-2's forward pass, written once against ModelOps: no communication, logical names only.
#pragma once
#include <ATen/ATen.h>

#include "config/config.h"
#include "model/kv_cache.h"
#include "model/model_ops.h"

namespace spmd {

class Gpt2 {
 public:
  explicit Gpt2(const ModelConfig& config) : config_(config) {}

  // Mean cross-entropy over this rank's rows. idx, targets: (B, T) int64 token ids.
  // document_starts: undefined, or (B, T) int64, where each token's document starts in its row
  // (packed documents, data like the targets): attention stays inside a document and positions
  // count from its start.
  at::Tensor loss(const at::Tensor& idx, const at::Tensor& targets, ModelOps& ops, bool training,
                  const at::Tensor& document_starts = at::Tensor()) const;

  // The same forward in the three parts a pipeline stage may run (loss = head_loss(blocks(embed))):
  // token + position embeddings (B, T) -> (B, T, C); blocks [begin, end) of the `layers` stack;
  // final LayerNorm and the tied head's mean cross-entropy.
  at::Tensor embed(const at::Tensor& idx, ModelOps& ops, bool training, int64_t first_position = 0,
                   const at::Tensor& document_starts = at::Tensor()) const;
  at::Tensor blocks(at::Tensor x, int64_t begin, int64_t end, ModelOps& ops, bool training,
                    const at::Tensor& document_starts = at::Tensor()) const;
  at::Tensor head_loss(const at::Tensor& x, const at::Tensor& targets, ModelOps& ops) const;
  // Evaluation: each row's summed cross-entropy over the positions whose target is not negative
  // ((B,) float, whole on every rank of the last stage).
  at::Tensor head_row_losses(const at::Tensor& x, const at::Tensor& targets, ModelOps& ops) const;
  int64_t n_layer() const { return config_.n_layer; }

  // Decoding (no dropout): logits (B, vocab) of the position after the last of idx (B, T).
  // With a cache, idx continues the positions it holds (their keys and values are reused and
  // idx's appended); without, idx is the whole context from position 0.
  at::Tensor next_token_logits(const at::Tensor& idx, ModelOps& ops, KvCache* cache) const;

 private:
  at::Tensor layer_norm(const at::Tensor& x, const std::string& prefix, ModelOps& ops) const;
  at::Tensor block(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training, KvCache* cache,
                   const at::Tensor& document_starts) const;
  at::Tensor attention(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training, KvCache* cache,
                       const at::Tensor& document_starts) const;
  at::Tensor cached_attention(const at::Tensor& qkv, int64_t layer, ModelOps& ops, KvCache& cache) const;
  at::Tensor mlp(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training) const;

  ModelConfig config_;
};

}  // namespace spmd
