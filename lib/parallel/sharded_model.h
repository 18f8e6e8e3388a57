// The parameters of a model laid out over a mesh: this rank's shards as autograd leaves,
// initialized shard by shard from the counter-based generator (no rank builds a full tensor),
// on the communicator's device. Parameters of other pipeline stages are undefined tensors here.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "comm/communicator.h"
#include "parallel/fsdp_prefetch.h"
#include "parallel/param_cast_cache.h"
#include "parallel/layout.h"

namespace spmd {

class ShardedModel {
 public:
  // Checks that the layout is one the runtime can execute, creates every process group the
  // step will use, and initializes this rank's shards.
  ShardedModel(ModelLayout layout, Communicator& comm, uint64_t seed);

  const ModelLayout& layout() const { return layout_; }
  Communicator& comm() const { return *comm_; }
  std::vector<at::Tensor>& params() { return params_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  size_t index_of(const std::string& name) const;
  bool holds(size_t i) const;  // false for another pipeline stage's parameter

  // The global tensor of parameter i, assembled on every rank (tests, export, checkpoints).
  at::Tensor gather_full(size_t i) const;
  // A tensor of parameter i's shard shape (its gradient, an update) assembled the same way over
  // the groups of i's sharding: the whole tensor on every rank holding i. Collective over them.
  at::Tensor gather_shards(size_t i, at::Tensor block) const;
  // Bytes of this rank's parameter shards.
  int64_t local_param_bytes() const;

  // Gathers the FSDP weights a block (ParamInfo.layer) at a time, overlapping the next block's
  // all-gather with this one's compute (runtime.fsdp_prefetch, on by default).
  FsdpPrefetcher& fsdp_prefetcher() { return *prefetcher_; }
  const FsdpPrefetcher& fsdp_prefetcher() const { return *prefetcher_; }
  // How parameter i becomes the tensor layers compute with: empty unless FSDP over a group > 1.
  FsdpGathers fsdp_gathers(size_t i) const;
  // Parameter i (this rank's block) in `dtype`, cast once per optimizer update (bf16 matmuls).
  at::Tensor param_as(size_t i, at::ScalarType dtype) { return casts_.get(i, params_[i], dtype); }
  // How many attention forwards sent keys and values around the context axes (the ring), as
  // opposed to gathering them: summary.json shows which exchange ran.
  int64_t ring_attention_forwards() const { return ring_attention_forwards_; }
  void count_ring_attention_forward() { ++ring_attention_forwards_; }

 private:
  void validate_layout() const;
  void create_groups();

  ModelLayout layout_;
  Communicator* comm_;
  std::vector<at::Tensor> params_;
  std::unique_ptr<FsdpPrefetcher> prefetcher_;
  ParamCastCache casts_;
  int64_t ring_attention_forwards_ = 0;
};

}  // namespace spmd
