// Memory estimate: exact for parameter-shaped state, a model of saved activations otherwise.
#include "inspect/memory_estimate.h"

#include <algorithm>
#include <numeric>

namespace spmd {

namespace {
constexpr int64_t kFloatBytes = 4;

int64_t product(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{1}, std::multiplies<>());
}

// Floats saved for backward per token and layer, and for the head, with `tp` the model-parallel
// degree of heads/mlp/vocab: LayerNorm inputs and outputs, q/k/v, attention scores and
// probabilities (T per head), attention output, MLP hidden before and after GELU, residuals.
int64_t activation_floats(const ModelConfig& m, int64_t local_batch, int64_t heads_tp, int64_t mlp_tp,
                          int64_t vocab_tp, int64_t padded_vocab) {
  const int64_t C = m.n_embd, T = m.block_size, H = m.n_head;
  int64_t per_token_layer = 6 * C + (3 * C + C) / heads_tp + 2 * (H / heads_tp) * T + 2 * (4 * C) / mlp_tp;
  int64_t per_token_head = 2 * C + 2 * padded_vocab / vocab_tp;  // ln_f, logits and their softmax
  return local_batch * T * (m.n_layer * per_token_layer + per_token_head);
}
}  // namespace

MemoryEstimate estimate_memory(const ModelLayout& layout, int64_t global_batch, int64_t rank) {
  MemoryEstimate e;
  for (const auto& p : layout.params) {
    int64_t shard = p.sharding.shard_numel() * kFloatBytes;
    e.params += shard;
    // An FSDP weight is gathered for its layer and freed after (again in backward): the working
    // set is, at worst, the largest gathered weight, its full gradient before the reduce-scatter,
    // and the next weight's gather in flight (runtime.fsdp_prefetch; one weight less without).
    if (p.is_fsdp()) e.fsdp_gathered = std::max(e.fsdp_gathered, 3 * product(p.gathered_shape()) * kFloatBytes);
  }
  e.grads = e.params;
  e.optimizer = 2 * e.params;
  const auto& mesh = layout.mesh;
  auto tp_of = [&](const std::string& name, size_t dim) {
    return mesh.axes_size(layout.param(name).tp_axes[dim]);
  };
  int64_t heads_tp = tp_of("h.0.attn.c_attn.weight", 2);
  int64_t mlp_tp = tp_of("h.0.mlp.c_fc.weight", 1);
  int64_t vocab_tp = tp_of("wte", 0);
  int64_t local_batch = global_batch / layout.dp_size();
  e.activations = activation_floats(layout.model, local_batch, heads_tp, mlp_tp, vocab_tp, layout.padded_vocab) *
                  kFloatBytes;
  return e;
}

MemoryEstimate estimate_unsharded_memory(const ModelConfig& model, int64_t global_batch) {
  MemoryEstimate e;
  for (const auto& p : gpt2_param_table(model, model.vocab_size)) e.params += product(p.shape) * kFloatBytes;
  e.grads = e.params;
  e.optimizer = 2 * e.params;
  e.activations = activation_floats(model, global_batch, 1, 1, 1, model.vocab_size) * kFloatBytes;
  return e;
}

}  // namespace spmd
