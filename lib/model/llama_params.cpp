// The Llama parameter table with logical axes: the names Hugging Face's layout maps onto
// (lib/hf), weights input-major like GPT-2's, key/value heads on the `heads` axis like the
// query heads.
#include "model/llama_params.h"

#include <cmath>

#include <fmt/format.h>

namespace spmd {

namespace {
// A sparse layer's MLP (docs/experts.md): the router (embed -> one logit per expert; the expert
// dim never sharded), the E experts' SwiGLU weights stacked on a leading `expert` dim, and
// optionally a shared expert with its sigmoid gate (Qwen2-MoE).
void add_expert_params(std::vector<ParamInfo>& table, const ModelConfig& c, const std::string& p,
                       double residual_std) {
  const int64_t C = c.n_embd, E = c.moe.num_experts, I = c.expert_mlp_size();
  auto add = [&](std::string name, std::vector<int64_t> shape, std::vector<std::string> logical, double std,
                 int64_t input_dims) {
    table.push_back({std::move(name), std::move(shape), std::move(logical), ParamInit::kNormal, std, true, input_dims});
  };
  add(p + ".router.weight", {C, E}, {"embed", ""}, 0.02, 1);
  table.back().per_position = true;  // computed on each rank's own positions (sequence parallelism)
  add(p + ".experts.gate", {E, C, I}, {"expert", "embed", "mlp"}, 0.02, 0);
  add(p + ".experts.up", {E, C, I}, {"expert", "embed", "mlp"}, 0.02, 0);
  add(p + ".experts.down", {E, I, C}, {"expert", "mlp", "embed"}, residual_std, 0);
  if (c.moe.expert_bias_update_rate > 0) {  // moved by the step's loads, not by gradients
    table.push_back({p + ".router.choice_bias", {E}, {""}, ParamInit::kZeros, 0.0, false, 0});
    table.back().trained = false;
  }
  const int64_t S = c.moe.shared_expert_intermediate_size;
  if (S == 0) return;
  add(p + ".shared.gate.weight", {C, S}, {"embed", "mlp"}, 0.02, 1);
  add(p + ".shared.up.weight", {C, S}, {"embed", "mlp"}, 0.02, 1);
  add(p + ".shared.down.weight", {S, C}, {"mlp", "embed"}, residual_std, 1);
  add(p + ".shared_gate.weight", {C, 1}, {"embed", ""}, 0.02, 1);
  table.back().per_position = true;
}
}  // namespace

std::vector<ParamInfo> llama_param_table(const ModelConfig& c, int64_t padded_vocab) {
  const int64_t C = c.n_embd, H = c.n_head, Hkv = c.kv_heads(), D = c.head_dim(), F = c.mlp_size();
  // Residual projections scaled by 1/sqrt(2 * n_layer), as GPT-2's.
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  std::vector<ParamInfo> table;
  auto add = [&](std::string name, std::vector<int64_t> shape, std::vector<std::string> logical,
                 ParamInit init, double std = 0.02, int64_t input_dims = 0) {
    const bool decay = init == ParamInit::kNormal;  // matrices and embeddings, not norm scales
    table.push_back({std::move(name), std::move(shape), std::move(logical), init, std, decay, input_dims});
  };
  auto rms_norm = [&](const std::string& name) {
    add(name, {C}, {"embed"}, ParamInit::kOnes);
    table.back().per_position = true;
  };
  auto vocab_table = [&](const std::string& name) {
    add(name, {padded_vocab, C}, {"vocab", "embed"}, ParamInit::kNormal);
    table.back().padded_dim = 0;
    table.back().unpadded_size = c.vocab_size;
  };

  vocab_table("wte");
  table.back().before_stack = true;
  table.back().after_stack = c.tie_embeddings;  // the head too when tied
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const size_t first = table.size();
    const std::string h = fmt::format("h.{}", l);
    rms_norm(h + ".attn_norm.weight");
    add(h + ".attn.q.weight", {C, H, D}, {"embed", "heads", "kv"}, ParamInit::kNormal, 0.02, 1);
    add(h + ".attn.k.weight", {C, Hkv, D}, {"embed", "heads", "kv"}, ParamInit::kNormal, 0.02, 1);
    add(h + ".attn.v.weight", {C, Hkv, D}, {"embed", "heads", "kv"}, ParamInit::kNormal, 0.02, 1);
    add(h + ".attn.o.weight", {H, D, C}, {"heads", "kv", "embed"}, ParamInit::kNormal, residual_std, 2);
    if (c.qk_norm) {  // one scale per head channel, shared by every head (Qwen3's q_norm, k_norm)
      add(h + ".attn.q_norm.weight", {D}, {"kv"}, ParamInit::kOnes);
      table.back().per_head = true;
      add(h + ".attn.k_norm.weight", {D}, {"kv"}, ParamInit::kOnes);
      table.back().per_head = true;
    }
    rms_norm(h + ".mlp_norm.weight");
    if (c.moe.sparse_layer(l)) {
      add_expert_params(table, c, h + ".moe", residual_std);
    } else {
      add(h + ".mlp.gate.weight", {C, F}, {"embed", "mlp"}, ParamInit::kNormal, 0.02, 1);
      add(h + ".mlp.up.weight", {C, F}, {"embed", "mlp"}, ParamInit::kNormal, 0.02, 1);
      add(h + ".mlp.down.weight", {F, C}, {"mlp", "embed"}, ParamInit::kNormal, residual_std, 1);
    }
    for (size_t i = first; i < table.size(); ++i) table[i].layer = l;
  }
  rms_norm("ln_f.weight");
  table.back().after_stack = true;
  if (!c.tie_embeddings) {
    vocab_table("lm_head");
    table.back().after_stack = true;
  }
  return table;
}

std::vector<SizeSource> llama_size_sources(const ModelConfig& c) {
  const int64_t H = c.n_head, C = c.n_embd;
  const std::string keep = fmt::format("a multiple of model.n_head = {}", H);
  return {
      {"heads", "model.n_head", "model.n_head", H,
       [Hkv = c.kv_heads()](int64_t v) { return v % Hkv == 0 ? v : int64_t{-1}; },
       fmt::format("model.n_embd = {} must stay a multiple of it, and it of model.n_kv_head = {}", C, c.kv_heads())},
      // The key/value projections' heads dim: shards split whole key/value heads.
      {"heads", "model.n_kv_head", "model.n_kv_head", c.kv_heads(),
       [H](int64_t v) { return H % v == 0 ? v : int64_t{-1}; }, fmt::format("a divisor of model.n_head = {}", H)},
      {"embed", "model.n_embd", "model.n_embd", C, [H](int64_t v) { return v % H == 0 ? v : int64_t{-1}; }, keep},
      {"mlp", "model.intermediate_size", "model.intermediate_size", c.mlp_size(), [](int64_t v) { return v; }, ""},
      {"mlp", "model.moe.moe_intermediate_size", "model.moe.moe_intermediate_size", c.expert_mlp_size(),
       [](int64_t v) { return v; }, ""},
      {"mlp", "model.moe.shared_expert_intermediate_size", "model.moe.shared_expert_intermediate_size",
       c.moe.shared_expert_intermediate_size, [](int64_t v) { return v; }, ""},
      {"expert", "model.moe.num_experts", "model.moe.num_experts", c.moe.num_experts, [](int64_t v) { return v; },
       fmt::format("at least model.moe.num_experts_per_tok = {}", c.moe.num_experts_per_tok)},
      c.attention_head_dim > 0
          ? SizeSource{"kv", "model.head_dim", "model.head_dim", c.attention_head_dim, [](int64_t v) { return v; }, ""}
          : SizeSource{"kv", "model.n_embd", "model.n_embd / model.n_head", C,
                       [H](int64_t v) { return v % H == 0 ? v / H : int64_t{-1}; }, keep},
      {"seq", "model.block_size", "model.block_size", c.block_size, [](int64_t v) { return v; }, ""},
      {"vocab", "model.vocab_size", "model.vocab_size", c.vocab_size, [](int64_t v) { return v; }, ""},
  };
}

}  // namespace spmd
