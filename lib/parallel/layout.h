// The layout of a GPT-2 over a mesh: every parameter's NamedSharding from the logical rules,
// the batch (data-parallel) axes, the padded vocabulary. Computed abstractly: no tensors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "mesh/mesh.h"
#include "mesh/sharding.h"
#include "model/params.h"

namespace spmd {

// Each shard of the vocabulary dim holds a multiple of this many ids (padding at the end).
constexpr int64_t kVocabShardMultiple = 64;

struct ParamLayout {
  ParamInfo info;
  NamedSharding sharding;
  // Sharded mesh axes of each dim split by role: those the batch is sharded over (FSDP: gathered
  // before use) and the others (tensor parallel: the layer computes on the shard).
  std::vector<std::vector<std::string>> fsdp_axes;
  std::vector<std::vector<std::string>> tp_axes;
  // Sequence parallelism: the mesh axes the residual stream's `seq` is split over, for a
  // per-position parameter replicated on them: each split's gradient is a partial sum over them.
  // Likewise the axes splitting the attention heads, for a per-head parameter replicated on them.
  std::vector<std::string> sequence_axes;
  // Expert parallelism: the mesh axes of the `expert` dim. They stay local (each rank computes
  // with its own experts, tokens travel to them), and when they also split the batch, the tokens
  // of every member already reached this rank's experts: no gradient sum over them.
  std::vector<std::string> expert_axes;
  bool is_fsdp() const;
  // For dense weights: the tensor-parallel axes of the input (contracted) dims and of the output
  // dims. Column-parallel layers have output axes, row-parallel ones input axes.
  std::vector<std::string> input_tp_axes() const;
  std::vector<std::string> output_tp_axes() const;
  std::vector<int64_t> gathered_shape() const;  // shape after the FSDP all-gather
};

// The stack of blocks staged over a mesh axis by a `layers` rule, in virtual stages of contiguous
// blocks: virtual stage u holds blocks [layer_begin[u], layer_begin[u + 1]) and runs on stage
// u mod stages() as its chunk u / stages() (interleaved 1F1B; one chunk per stage otherwise). The
// first virtual stage also holds the embeddings, the last the final norm and head. Without the
// rule there is one stage holding everything.
struct PipelineLayout {
  std::string axis;                  // "" without a `layers` rule
  std::vector<int64_t> layer_begin;  // virtual_stages() + 1 boundaries
  int64_t chunks = 1;                // virtual stages per stage
  int64_t virtual_stages() const { return static_cast<int64_t>(layer_begin.size()) - 1; }
  int64_t stages() const { return virtual_stages() / chunks; }
  int64_t virtual_stage_of_layer(int64_t layer) const;
  int64_t stage_of_layer(int64_t layer) const { return virtual_stage_of_layer(layer) % stages(); }
  // The blocks of `stage`'s chunk `chunk`: [chunk_begin, chunk_end).
  int64_t chunk_begin(int64_t stage, int64_t chunk) const { return layer_begin[static_cast<size_t>(chunk * stages() + stage)]; }
  int64_t chunk_end(int64_t stage, int64_t chunk) const { return layer_begin[static_cast<size_t>(chunk * stages() + stage + 1)]; }
  int64_t blocks_of_stage(int64_t stage) const;  // over all its chunks
};

struct ModelLayout {
  Mesh mesh;
  LogicalRules rules;
  ModelConfig model;
  int64_t padded_vocab = 0;              // vocab_size rounded up to kVocabShardMultiple x the vocab dim's shard count
  std::vector<std::string> batch_axes;   // mesh axes of the activations' `batch` dim
  PartitionSpec activation_spec;         // ('batch', 'seq', 'embed') resolved
  std::vector<std::string> seq_axes;     // the residual stream's sequence split (sequence parallelism)
  // Context parallelism: `seq` mapped onto mesh axes that shard no weight. Every activation is
  // split along the sequence over them, in head-tail chunks (docs/context-parallel.md).
  std::vector<std::string> context_axes;
  std::vector<ParamLayout> params;       // in param_table order
  PipelineLayout pipeline;
  // How attention exchanges keys and values over the context axes (runtime.context_exchange).
  ContextExchange context_exchange = ContextExchange::kAllGather;
  // runtime.device is cuda: what the memory estimate assumes of device-dependent sizes.
  bool on_gpu = false;
  // What the memory estimate assumes of routing (spmd-inspect --expert-load): the fullest device's
  // experts each receive up to this many times their mean rows. Training routes as the data says.
  double expert_load = 1;

  int64_t dp_size() const { return mesh.axes_size(batch_axes); }
  int64_t stage_of(int64_t rank) const { return pipeline.axis.empty() ? 0 : mesh.index_along(rank, {pipeline.axis}); }
  int64_t dp_index(int64_t rank) const { return mesh.index_along(rank, batch_axes); }
  int64_t cp_size() const { return mesh.axes_size(context_axes); }
  int64_t cp_index(int64_t rank) const { return mesh.index_along(rank, context_axes); }
  // The axes over which every rank holds distinct tokens of the step (data and context), and so
  // over which the loss is averaged and replicated gradients summed.
  std::vector<std::string> token_axes() const;
  int64_t token_split() const { return dp_size() * cp_size(); }
  // The axes over which ranks route distinct tokens through distinct sparse layers: the token
  // axes, the sequence split (each member routes its own positions) and the pipeline's stages.
  std::vector<std::string> routing_axes() const;
  // The devices the routed experts are split over: the size of their `expert` dim's mesh axes
  // (1: a dense model, or every device holding every expert).
  int64_t expert_devices() const;
  const ParamLayout& param(const std::string& name) const;
};

// The mesh axes a parameter's gradient is summed over: the token axes it is replicated on (the
// data- and context-parallel replicas; FSDP dims are reduce-scattered in backward instead) and,
// for a per-position parameter under sequence parallelism, the sequence split's axes.
std::vector<std::string> gradient_sum_axes(const ModelLayout& layout, const ParamLayout& p);

// Resolves everything and validates divisibility; errors name the tensor, dim and sizes.
ModelLayout plan_layout(const Config& config);

}  // namespace spmd
