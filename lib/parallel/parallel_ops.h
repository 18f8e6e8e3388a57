// ModelOps over a ShardedModel: turns the model's logical requests into local compute plus the
// collectives the layout needs (FSDP gathers, Megatron column/row splits, vocab-parallel loss).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/choices.h"  // Remat: what the backward recomputes (runtime.remat)
#include "experts/step_routing.h"
#include "kernels/kernels.h"
#include "model/model_ops.h"
#include "parallel/context_parallel.h"
#include "parallel/fsdp_ops.h"
#include "parallel/head_loss.h"
#include "parallel/recompute.h"
#include "parallel/sharded_model.h"

namespace spmd {

// The part of this rank's rows of a step that one pass computes: slice `index` of `count` equal
// slices along the batch dim (gradient accumulation). Dropout masks are indexed by the global
// batch row, so a microbatch draws exactly its rows of the mask the whole batch would draw.
struct Microbatch {
  int64_t index = 0;
  int64_t count = 1;
};

class ParallelOps : public ModelOps {
 public:
  // One per forward pass (and the backward of its graph): it tells the model's FSDP prefetcher
  // that a pass begins. `microbatch`: which slice of the rank's rows the pass's inputs are.
  // `decoding`: the sequence is whole on every rank, whatever its length (sequence parallelism
  // off: a decoder feeds one position at a time).
  ParallelOps(ShardedModel& model, uint64_t seed, int64_t step, Microbatch microbatch = {}, Remat remat = Remat::kNone,
              bool decoding = false)
      : model_(model), seed_(seed), step_(step), microbatch_(microbatch), remat_(remat), decoding_(decoding) {
    model_.fsdp_prefetcher().begin_forward();
  }

  at::Tensor param(const std::string& name) override;
  bool has_param(const std::string& name) const override;
  at::Tensor dense(const at::Tensor& x, const std::string& weight, const std::string& bias,
                   int64_t contracted_dims) override;
  at::Tensor dense_concat(const at::Tensor& x, const std::vector<std::string>& weights,
                          int64_t contracted_dims) override;
  at::Tensor layer_norm(const at::Tensor& x, const std::string& weight, const std::string& bias, double eps) override;
  at::Tensor rms_norm(const at::Tensor& x, const std::string& weight, double eps) override;
  AddNormed add_layer_norm(const at::Tensor& x, const at::Tensor& delta, const std::string& weight,
                           const std::string& bias, double eps) override;
  at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) override;
  at::Tensor dense_gelu(const at::Tensor& x, const std::string& weight, const std::string& bias) override;
  AddNormed add_rms_norm(const at::Tensor& x, const at::Tensor& delta, const std::string& weight, double eps) override;
  at::Tensor positions(int64_t length, int64_t first_position, const at::Tensor& document_starts) override;
  at::Tensor embed(const std::string& table, const at::Tensor& ids) override;
  at::Tensor tied_head_loss(const at::Tensor& x, const std::string& table, const at::Tensor& targets) override;
  at::Tensor tied_head_row_losses(const at::Tensor& x, const std::string& table, const at::Tensor& targets) override;
  at::Tensor tied_head_logits(const at::Tensor& x, const std::string& table) override;
  at::Tensor attention_over_prefix(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) override;
  at::Tensor causal_attention(const at::Tensor& qkv, const std::string& dropout_site,
                              const at::Tensor& document_starts) override;
  at::Tensor rotary_attention(const at::Tensor& qkv, int64_t kv_heads, const at::Tensor& cos, const at::Tensor& sin,
                              const std::string& dropout_site, const at::Tensor& document_starts) override;
  at::Tensor bias_gelu(const at::Tensor& h, const std::string& bias) override;
  at::Tensor routed_experts(const at::Tensor& x, const at::Tensor& choice, const at::Tensor& weights,
                            const std::string& prefix) override;
  at::Tensor balance_experts(const at::Tensor& y, int64_t layer, const at::Tensor& probs,
                             const at::Tensor& choice) override;
  // Sparse layers (docs/experts.md): what this pass routed (null before its first sparse layer).
  const RoutingTally* pass_routing() const { return pass_routing_.get(); }
  // The step's routing, settled before the backward runs (it outlives the pass's graph): the
  // balancing loss's gradient then reaches the routers through balance_experts.
  void use_step_routing(const StepRouting* step) { step_routing_ = step; }
  at::Tensor swiglu(const at::Tensor& gate_up) override;
  at::Tensor dropout(const at::Tensor& x, const std::string& site, const std::vector<std::string>& logical) override;
  at::Tensor constrain(const at::Tensor& x, const std::vector<std::string>& logical) override;
  at::Tensor block(const at::Tensor& x, std::function<at::Tensor(const at::Tensor&)> body) override;

 private:
  const ParamLayout& layout_of(const std::string& name) const;
  at::Tensor shard(const std::string& name) const;  // this rank's stored block
  bool is_fsdp(const std::string& name) const { return prefetcher()->unit_of(model_.index_of(name)) >= 0; }
  // An FSDP weight with its gradient handle: the handles of a unit come from one node, made at
  // the unit's first use in this pass (in grad mode), so its gradients are reduce-scattered once.
  FsdpWeight fsdp_weight(const std::string& name);
  const Group& group(const std::vector<std::string>& axes) const { return model_.comm().along(axes); }
  // A dense product's input as the product takes it: as it is, or, for weights split along their
  // outputs over `out_tp` (column-parallel), in float32 and fanned out over (under sequence
  // parallelism: gathered along the sequence from) that group.
  at::Tensor column_input(const at::Tensor& x, const std::vector<std::string>& out_tp);
  // Whether x + delta and the norm with these parameters run as one op (kernels/residual_norm.h):
  // on the device-generic path (the GPU's), float32 residuals, weights held whole.
  bool fuses_residual_norm(const at::Tensor& x, const std::string& weight, const std::string& bias) const;
  bool sequence_parallel() const { return !decoding_ && !model_.layout().seq_axes.empty(); }
  // Context parallelism: every activation holds this rank's head-tail chunks of the sequence
  // (off when decoding: each rank then runs the whole sequence). Over one device the two chunks
  // are the sequence in order: plain (fused) attention, no K/V gather.
  bool context_parallel() const { return !decoding_ && model_.layout().cp_size() > 1; }
  ContextSplit context_split() const;
  // Attention of this rank's queries over every member's keys and values: all-gathered, or sent
  // around the ring (runtime.context_exchange). document_starts: the whole sequence's, or undefined.
  at::Tensor context_attention(const at::Tensor& qkv, const std::string& dropout_site,
                               const at::Tensor& document_starts);
  // Where this rank's block of `shape` sits in the global array (the batch's rows: this
  // microbatch's slice), and which dim, if any, holds the context-parallel head-tail chunks.
  struct DropoutBlock {
    std::vector<int64_t> local, global, offset;
    int64_t seq_dim = -1;
    uint64_t stream = 0;
  };
  DropoutBlock dropout_block(at::IntArrayRef shape, const std::string& site, const std::vector<std::string>& logical);
  // dropout()'s multipliers (0 or 1/(1-p)) for the block on `device`, drawn in one pass; under
  // context parallelism the dim on the context axes holds two chunks.
  at::Tensor dropout_multipliers(const DropoutBlock& block, c10::Device device);
  // The same block as its draws, for a kernel that draws them itself; no dim on the context axes.
  kernels::DropoutDraws dropout_draws(const DropoutBlock& block);
  at::Tensor local_logits(const at::Tensor& x2, const std::string& table);  // (rows, C) -> (rows, V_local)
  // The head's input: this rank's positions (B * T_local, C) (the whole sequence's under
  // sequence parallelism), their targets (B * T_local,), and where `table`'s shard sits.
  struct HeadInput {
    at::Tensor x, targets;
    HeadShard head;
  };
  HeadInput head_input(const at::Tensor& x, const std::string& table, const at::Tensor& targets);
  // body(x), recomputed in backward; the body lives as long as this ParallelOps (its graph's).
  at::Tensor recomputed(const at::Tensor& x, RecomputedBody body);
  FsdpPrefetcher* prefetcher() const { return &model_.fsdp_prefetcher(); }
  // The operand dtype of dense products (model.matmul_dtype; float32 on a CPU without bf16
  // instructions). bf16: activations between matmuls stay bf16; the residual stream, LayerNorm's
  // statistics, the loss and the optimizer stay float32.
  at::ScalarType matmul_dtype() const {
    return kernels::matmul_operand_dtype(model_.layout().model.matmul_dtype, model_.comm().device());
  }
  // A parameter as a matmul operand: in matmul_dtype(), cast once per optimizer update (the
  // model's cache); FSDP-gathered ones in float32 (fsdp_linear casts the gathered weight).
  at::Tensor matmul_param(const std::string& name);

  ShardedModel& model_;
  uint64_t seed_;
  int64_t step_;
  Microbatch microbatch_;
  Remat remat_;
  bool decoding_;
  int64_t sequence_length_ = -1;  // of the token ids embed() saw (the full sequence)
  std::vector<std::unique_ptr<RecomputedBody>> bodies_;
  std::map<int64_t, std::vector<at::Tensor>> unit_handles_;  // per FSDP unit, this pass's
  std::unique_ptr<RoutingTally> pass_routing_;
  const StepRouting* step_routing_ = nullptr;
};

}  // namespace spmd
