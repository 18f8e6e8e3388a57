// A sparse layer's sizes and kept bytes on one device (expert_memory.h). What each op keeps is
// the runtime's (model/sparse_mlp.cpp, parallel/expert_ops.cpp, experts/): the router's dense layer
// its input; softmax its float32 output; gather its int64 index (the choice); the sort's
// index_selects their int64 indices (into the rows, and back to the (token, slot) order); each
// expert's products their input rows and the SwiGLU's hidden tensors; the mixing product the k
// outputs (fp32) and the weights. The all-to-all keeps nothing: its backward is the reverse
// exchange; what it sends is freed once the rows arrive.
#include "inspect/expert_memory.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace spmd {

namespace {
constexpr int64_t kExpertFloat = 4, kExpertIndex = 8;

std::string sparse_prefix(int64_t layer) { return "h." + std::to_string(layer) + ".moe."; }
}  // namespace

ExpertShapes expert_shapes(const ModelLayout& layout) {
  const ModelConfig& m = layout.model;
  ExpertShapes e;
  const std::vector<int64_t> sparse = m.sparse_layers();
  if (sparse.empty()) return e;
  const std::string p = sparse_prefix(sparse.front());
  const ParamLayout& gate = layout.param(p + "experts.gate");  // (E, C, I) (expert, embed, mlp)
  e.experts = gate.info.shape[0];
  e.per_token = m.moe.num_experts_per_tok;
  e.normalize = m.moe.norm_topk_prob;
  e.mlp_axes = gate.tp_axes[2];
  e.mlp_share = layout.mesh.axes_size(e.mlp_axes);
  e.expert_mlp = gate.info.shape[2] / e.mlp_share;
  e.expert_axes = gate.expert_axes;
  e.expert_parallel = layout.expert_devices();
  e.load = layout.expert_load;
  if (m.moe.shared_expert_intermediate_size > 0) {
    const ParamLayout& shared = layout.param(p + "shared.gate.weight");  // (C, S) (embed, mlp)
    e.shared_mlp = shared.info.shape[1] / layout.mesh.axes_size(shared.tp_axes[1]);
  }
  return e;
}

ExpertShapes unsharded_expert_shapes(const ModelConfig& m) {
  ExpertShapes e;
  if (m.sparse_layers().empty()) return e;
  e.experts = m.moe.num_experts;
  e.per_token = m.moe.num_experts_per_tok;
  e.normalize = m.moe.norm_topk_prob;
  e.expert_mlp = m.expert_mlp_size();
  e.shared_mlp = m.moe.shared_expert_intermediate_size;
  return e;
}

double ExpertShapes::max_load() const {
  const int64_t local = experts / expert_parallel;
  return static_cast<double>(expert_parallel * std::min(per_token, local)) / static_cast<double>(per_token);
}

int64_t ExpertShapes::routed_rows(int64_t group_tokens) const {
  const double balanced = static_cast<double>(group_tokens * per_token);
  return static_cast<int64_t>(std::ceil(balanced * std::min(load, max_load())));
}

int64_t sparse_mlp_kept_bytes(const ExpertShapes& e, const SparseTokens& n, int64_t C, int64_t operand,
                              int64_t hidden_kept) {
  const int64_t k = e.per_token, sent = n.group * k, rows = e.routed_rows(n.group);
  int64_t bytes = n.own * C * operand                                   // the router's input
                  + n.own * e.experts * kExpertFloat                    // softmax's probabilities
                  + n.own * k * (kExpertIndex + kExpertFloat)           // the choice, the mixing weights
                  + 2 * sent * kExpertIndex                             // the sort's indices, there and back
                  + rows * C * operand                                  // the rows the expert products read
                  + rows * e.expert_mlp * (hidden_kept + 1) * operand   // SwiGLU's kept hidden, down's input
                  + n.own * k * C * kExpertFloat;                       // the k outputs the mixing keeps
  if (e.normalize) bytes += n.own * (k + 1) * kExpertFloat;             // the division's operands
  if (e.shared_mlp > 0)                                                 // a dense SwiGLU, its gate and output
    bytes += n.own * e.shared_mlp * (hidden_kept + 1) * operand + n.own * kExpertFloat + n.own * C * kExpertFloat;
  return bytes;
}

int64_t sparse_mlp_working_set(const ExpertShapes& e, const SparseTokens& n, int64_t C) {
  const int64_t rows = e.routed_rows(n.group), sent = n.group * e.per_token;
  const int64_t dispatch = e.expert_parallel > 1 ? (sent + rows) * C * kExpertFloat : 0;
  return 2 * rows * e.expert_mlp * kExpertFloat + dispatch;
}

double all_to_all_bytes(double rows, double row_bytes, int64_t members) {
  return rows * row_bytes * static_cast<double>(members - 1) / static_cast<double>(members);
}

std::vector<ParamInfo> layer_entries(const std::vector<ParamInfo>& table, int64_t layer) {
  std::vector<ParamInfo> out;
  for (const ParamInfo& p : table)
    if (p.layer == layer) {
      out.push_back(p);
      out.back().layer = 0;
    }
  return out;
}

int64_t first_dense_layer(const ModelConfig& model) {
  for (int64_t l = 0; l < model.n_layer; ++l)
    if (!model.moe.sparse_layer(l)) return l;
  return -1;
}

}  // namespace spmd
