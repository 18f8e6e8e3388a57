// A sparse layer (model.moe; docs/experts.md) on one device, for the memory estimate and the step
// cost: the sizes its routed experts compute with, and what its MLP keeps for backward. Routing is
// taken as balanced: each device's experts receive, on average, k rows per token it sends (the
// router's choice depends on the data; measured loads are in metrics.jsonl), unless the layout's
// expert_load asks the memory estimate for a fuller device. Torch-free.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/params.h"
#include "parallel/layout.h"

namespace spmd {

struct ExpertShapes {
  int64_t experts = 0;          // E: one router logit per expert (0: a dense model)
  int64_t per_token = 0;        // k: the experts each token reaches
  int64_t expert_mlp = 0;       // each expert's SwiGLU width on this device (over its `mlp` dim's share)
  int64_t mlp_share = 1;        // that share: the tensor-parallel group within an expert
  std::vector<std::string> mlp_axes;     // its mesh axes (empty: each expert whole on a device)
  int64_t shared_mlp = 0;       // the shared expert's width on this device (0: none)
  bool normalize = false;       // norm_topk_prob: the k weights divided by their sum (kept for backward)
  std::vector<std::string> expert_axes;  // the `expert` dim's mesh axes: the all-to-all's group
  int64_t expert_parallel = 1;  // its size (1: every device holds every expert, no exchange)
  double load = 1;              // the layout's expert_load: each of the device's experts at this x its mean
  bool enabled() const { return experts > 0; }
  // The most a device's routed rows can be over the balanced count: every token of the all-to-all
  // group sends it min(k, its experts) rows. 1 without expert parallelism (a device computes its
  // own tokens' k rows, however they are routed).
  double max_load() const;
  // The rows a device's experts compute for `group_tokens` routed tokens per member: k per token,
  // times the load (at most max_load()).
  int64_t routed_rows(int64_t group_tokens) const;
};

// From the layout's first sparse layer (a default ExpertShapes for a dense model).
ExpertShapes expert_shapes(const ModelLayout& layout);
// The same model on one device (nothing sharded).
ExpertShapes unsharded_expert_shapes(const ModelConfig& model);

// Tokens through one sparse layer on a device: `own` of the residual stream's positions (router,
// weights, the mixed output), and `group`, those its experts' tensor-parallel group routes together
// (the gathered sequence under sequence parallelism with experts split over `mlp`; else own).
struct SparseTokens {
  int64_t own = 0, group = 0;
};

// What the sparse MLP keeps for backward beside the residual stream and the norms (bytes): the
// router's input (operand dtype) and float32 probabilities (N, E); the choice (int64) and the
// mixing weights (fp32; with norm_topk_prob the division's operands too); the sort's two int64
// indices per row; the routed rows each expert product keeps (operand dtype, rows x C); the
// SwiGLU's kept hidden tensors (`hidden_kept` of them) and down's input (rows x I'); each token's
// k outputs (N, k, C) fp32 the mixing keeps; a shared expert's SwiGLU as a dense MLP's, its
// sigmoid gate and float32 output. `operand`: bytes per matmul operand.
int64_t sparse_mlp_kept_bytes(const ExpertShapes& e, const SparseTokens& n, int64_t C, int64_t operand,
                              int64_t hidden_kept);

// The sparse MLP's backward at its widest: the hidden gradients of the routed rows (two fp32
// (rows, I') tensors), and under expert parallelism the exchanged gradient of the k outputs, sent
// and received at once (two fp32 (rows, C) buffers: the dispatch's).
int64_t sparse_mlp_working_set(const ExpertShapes& e, const SparseTokens& n, int64_t C);

// Bytes one all-to-all moves off a device: of its `rows` rows of `row_bytes`, the (n-1)/n that go
// to the other n - 1 members (balanced routing).
double all_to_all_bytes(double rows, double row_bytes, int64_t members);

// Layer `layer`'s table entries relabelled as layer 0 (block_weights reads layer 0's): the dense
// blocks' weights in a model whose first layers are sparse.
std::vector<ParamInfo> layer_entries(const std::vector<ParamInfo>& table, int64_t layer);
// The first layer with a dense MLP; -1 when every layer is sparse.
int64_t first_dense_layer(const ModelConfig& model);

}  // namespace spmd
