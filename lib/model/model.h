// A model family's forward pass, written once against ModelOps: no communication, logical names
// only. Everything that trains, evaluates or samples holds a Model and never names the family
// (docs/models.md); make_model picks it from model.arch.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "config/config.h"
#include "model/kv_cache.h"
#include "model/model_ops.h"

namespace spmd {

// The residual stream's logical axes, (B, T, C), in every family.
inline const std::vector<std::string> kResidualAxes{"batch", "seq", "embed"};

class Model {
 public:
  virtual ~Model() = default;

  // Mean cross-entropy over this rank's rows. idx, targets: (B, T) int64 token ids.
  // document_starts: undefined, or (B, T) int64, where each token's document starts in its row
  // (packed documents, data like the targets): attention stays inside a document and positions
  // count from its start.
  at::Tensor loss(const at::Tensor& idx, const at::Tensor& targets, ModelOps& ops, bool training,
                  const at::Tensor& document_starts = at::Tensor()) const {
    const at::Tensor x = embed(idx, ops, training, 0, document_starts);
    return head_loss(blocks(x, 0, n_layer(), ops, training, document_starts), targets, ops);
  }

  // The same forward in the three parts a pipeline stage may run (loss = head_loss(blocks(embed))):
  // embeddings (B, T) -> (B, T, C); blocks [begin, end) of the `layers` stack; the final norm and
  // the head's mean cross-entropy.
  virtual at::Tensor embed(const at::Tensor& idx, ModelOps& ops, bool training, int64_t first_position = 0,
                           const at::Tensor& document_starts = at::Tensor()) const = 0;
  at::Tensor blocks(at::Tensor x, int64_t begin, int64_t end, ModelOps& ops, bool training,
                    const at::Tensor& document_starts = at::Tensor()) const;
  at::Tensor head_loss(const at::Tensor& x, const at::Tensor& targets, ModelOps& ops) const;
  // Evaluation: each row's summed cross-entropy over the positions whose target is not negative
  // ((B,) float, whole on every rank of the last stage).
  at::Tensor head_row_losses(const at::Tensor& x, const at::Tensor& targets, ModelOps& ops) const;

  // Decoding (no dropout): logits (B, vocab) of the position after the last of idx (B, T).
  // With a cache, idx continues the positions it holds (their keys and values are reused and
  // idx's appended); without, idx is the whole context from position 0.
  at::Tensor next_token_logits(const at::Tensor& idx, ModelOps& ops, KvCache* cache) const;

  int64_t n_layer() const { return config_.n_layer; }
  const ModelConfig& config() const { return config_; }

 protected:
  explicit Model(const ModelConfig& config) : config_(config) {}
  // Block `layer` of the stack on the residual stream x; with a cache, decoding (no dropout).
  virtual at::Tensor block(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training, KvCache* cache,
                           const at::Tensor& document_starts) const = 0;
  // The norm after the last block, before the head (the head is head_table(config), model/params.h).
  virtual at::Tensor final_norm(const at::Tensor& x, ModelOps& ops) const = 0;
  ModelConfig config_;
};

// The forward of config.arch's family.
std::unique_ptr<Model> make_model(const ModelConfig& config);

}  // namespace spmd
