// ModelOps over a ShardedModel: turns the model's logical requests into local compute plus the
// collectives the layout needs (FSDP gathers, Megatron column/row splits, vocab-parallel loss).
#pragma once
#include <cstdint>
#include <string>

#include "kernels/kernels.h"
#include "model/model_ops.h"
#include "parallel/fsdp_ops.h"
#include "parallel/sharded_model.h"

namespace spmd {

class ParallelOps : public ModelOps {
 public:
  // One per forward pass (and the backward of its graph): it tells the model's FSDP prefetcher
  // that a pass begins.
  ParallelOps(ShardedModel& model, uint64_t seed, int64_t step) : model_(model), seed_(seed), step_(step) {
    model_.fsdp_prefetcher().begin_forward();
  }

  at::Tensor param(const std::string& name) override;
  bool has_param(const std::string& name) const override;
  at::Tensor dense(const at::Tensor& x, const std::string& weight, const std::string& bias,
                   int64_t contracted_dims) override;
  at::Tensor layer_norm(const at::Tensor& x, const std::string& weight, const std::string& bias, double eps) override;
  at::Tensor embed(const std::string& table, const at::Tensor& ids) override;
  at::Tensor tied_head_loss(const at::Tensor& x, const std::string& table, const at::Tensor& targets) override;
  at::Tensor causal_attention(const at::Tensor& qkv, const std::string& dropout_site) override;
  at::Tensor bias_gelu(const at::Tensor& h, const std::string& bias) override;
  at::Tensor dropout(const at::Tensor& x, const std::string& site, const std::vector<std::string>& logical) override;
  at::Tensor constrain(const at::Tensor& x, const std::vector<std::string>& logical) override;

 private:
  const ParamLayout& layout_of(const std::string& name) const;
  FsdpGathers fsdp_gathers(const ParamLayout& layout) const;  // empty unless gathered over a group > 1
  at::Tensor shard(const std::string& name) const;             // this rank's stored block
  const Group& group(const std::vector<std::string>& axes) const { return model_.comm().along(axes); }
  FsdpPrefetcher* prefetcher() { return &model_.fsdp_prefetcher(); }
  // The operand dtype of dense products (model.matmul_dtype).
  at::ScalarType matmul_dtype() const { return kernels::matmul_operand_dtype(model_.layout().model.matmul_dtype); }

  ShardedModel& model_;
  uint64_t seed_;
  int64_t step_;
};

}  // namespace spmd
