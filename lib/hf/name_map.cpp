// The name and shape mapping between our parameters and Hugging Face's, and each family's map.
#include "hf/name_map.h"

#include <functional>
#include <numeric>

#include "util/error.h"

namespace spmd {

namespace {
int64_t product(std::vector<int64_t>::const_iterator begin, std::vector<int64_t>::const_iterator end) {
  return std::accumulate(begin, end, int64_t{1}, std::multiplies<>());
}

}  // namespace

const HfNameMap& gpt2_hf_map() {
  static const HfNameMap map{
      "GPT-2",
      "GPT2LMHeadModel",
      "gpt2",
      "transformer.",
      {{"wte", "wte.weight"}, {"wpe", "wpe.weight"}},
      {},
      "h.",
      {},
      false,
      // The causal-mask buffers older transformers versions saved with every block.
      {".attn.bias", ".attn.masked_bias"},
      "lm_head.weight",
      {{"n_embd", "model.n_embd", [](const ModelConfig& m) { return m.n_embd; }},
       {"n_layer", "model.n_layer", [](const ModelConfig& m) { return m.n_layer; }},
       {"n_head", "model.n_head", [](const ModelConfig& m) { return m.n_head; }},
       {"n_positions", "model.block_size", [](const ModelConfig& m) { return m.block_size; }},
       {"vocab_size", "model.vocab_size", [](const ModelConfig& m) { return m.vocab_size; }}}};
  return map;
}

namespace {
// LlamaForCausalLM's names, which its relatives extend.
HfNameMap llama_family_map(std::string family, std::string architecture, std::string model_type) {
  return HfNameMap{
      std::move(family),
      std::move(architecture),
      std::move(model_type),
      "model.",
      {{"wte", "embed_tokens.weight"}, {"ln_f.weight", "norm.weight"}},
      {{"lm_head", "lm_head.weight"}},
      "layers.",
      {{".attn_norm.weight", ".input_layernorm.weight"},
       {".mlp_norm.weight", ".post_attention_layernorm.weight"},
       {".attn.q.weight", ".self_attn.q_proj.weight"},
       {".attn.k.weight", ".self_attn.k_proj.weight"},
       {".attn.v.weight", ".self_attn.v_proj.weight"},
       {".attn.o.weight", ".self_attn.o_proj.weight"},
       {".mlp.gate.weight", ".mlp.gate_proj.weight"},
       {".mlp.up.weight", ".mlp.up_proj.weight"},
       {".mlp.down.weight", ".mlp.down_proj.weight"}},
      true,
      // The rotary frequencies transformers 4.3x saved with every block.
      {".self_attn.rotary_emb.inv_freq"},
      "lm_head.weight",
      {{"hidden_size", "model.n_embd", [](const ModelConfig& m) { return m.n_embd; }},
       {"num_hidden_layers", "model.n_layer", [](const ModelConfig& m) { return m.n_layer; }},
       {"num_attention_heads", "model.n_head", [](const ModelConfig& m) { return m.n_head; }},
       {"num_key_value_heads", "model.n_kv_head", [](const ModelConfig& m) { return m.kv_heads(); }},
       {"intermediate_size", "model.intermediate_size", [](const ModelConfig& m) { return m.mlp_size(); }},
       {"vocab_size", "model.vocab_size", [](const ModelConfig& m) { return m.vocab_size; }}}};
}

void add_qk_norm(HfNameMap& map) {
  map.block_renamed.push_back({".attn.q_norm.weight", ".self_attn.q_norm.weight"});
  map.block_renamed.push_back({".attn.k_norm.weight", ".self_attn.k_norm.weight"});
}

// Qwen's sparse MLP: the router `mlp.gate`, experts `mlp.experts.E.{gate,up,down}_proj`, and
// Qwen2-MoE's shared expert beside them.
void add_qwen_experts(HfNameMap& map) {
  map.block_renamed.push_back({".moe.router.weight", ".mlp.gate.weight"});
  map.block_renamed.push_back({".moe.shared.gate.weight", ".mlp.shared_expert.gate_proj.weight"});
  map.block_renamed.push_back({".moe.shared.up.weight", ".mlp.shared_expert.up_proj.weight"});
  map.block_renamed.push_back({".moe.shared.down.weight", ".mlp.shared_expert.down_proj.weight"});
  map.block_renamed.push_back({".moe.shared_gate.weight", ".mlp.shared_expert_gate.weight"});
  map.expert_module = ".mlp.experts.";
  map.expert_tensors = {"gate_proj.weight", "up_proj.weight", "down_proj.weight"};
  map.config_sizes.push_back({"moe_intermediate_size", "model.moe.moe_intermediate_size",
                              [](const ModelConfig& m) { return m.expert_mlp_size(); }});
}
}  // namespace

const HfNameMap& llama_hf_map() {
  static const HfNameMap map = llama_family_map("Llama", "LlamaForCausalLM", "llama");
  return map;
}

const HfNameMap& qwen3_hf_map() {
  static const HfNameMap map = [] {
    HfNameMap m = llama_family_map("Qwen3", "Qwen3ForCausalLM", "qwen3");
    add_qk_norm(m);
    m.default_head_dim = 128;  // Qwen3Config's defaults
    m.default_kv_heads = 32;
    return m;
  }();
  return map;
}

const HfNameMap& qwen3_moe_hf_map() {
  static const HfNameMap map = [] {
    HfNameMap m = llama_family_map("Qwen3-MoE", "Qwen3MoeForCausalLM", "qwen3_moe");
    add_qk_norm(m);
    add_qwen_experts(m);
    m.default_kv_heads = 4;  // Qwen3MoeConfig's default
    return m;
  }();
  return map;
}

const HfNameMap& qwen2_moe_hf_map() {
  static const HfNameMap map = [] {
    HfNameMap m = llama_family_map("Qwen2-MoE", "Qwen2MoeForCausalLM", "qwen2_moe");
    add_qwen_experts(m);
    m.config_sizes.push_back({"shared_expert_intermediate_size", "model.moe.shared_expert_intermediate_size",
                              [](const ModelConfig& c) { return c.moe.shared_expert_intermediate_size; }});
    m.default_kv_heads = 16;  // Qwen2MoeConfig's default
    return m;
  }();
  return map;
}

// Mixtral's experts are w1 (gate), w3 (up), w2 (down) under block_sparse_moe, which transformers 5
// renames to mlp when it loads; its experts' width is config.json's intermediate_size.
const HfNameMap& mixtral_hf_map() {
  static const HfNameMap map = [] {
    HfNameMap m = llama_family_map("Mixtral", "MixtralForCausalLM", "mixtral");
    m.block_renamed.push_back({".moe.router.weight", ".block_sparse_moe.gate.weight"});
    m.expert_module = ".block_sparse_moe.experts.";
    m.expert_tensors = {"w1.weight", "w3.weight", "w2.weight"};
    m.block_aliases = {{".block_sparse_moe.", ".mlp."}};
    for (auto& size : m.config_sizes)
      if (size.hf_key == "intermediate_size")
        size = {"intermediate_size", "model.moe.moe_intermediate_size",
                [](const ModelConfig& c) { return c.expert_mlp_size(); }};
    m.default_kv_heads = 8;  // MixtralConfig's defaults
    m.default_rms_norm_eps = 1e-5;
    m.default_rope_theta = 1e6;
    return m;
  }();
  return map;
}

namespace {
// Why model.*'s experts fit no Hugging Face family (for the message), or "" when they fit one.
std::string no_expert_family(const ModelConfig& m) {
  const MoeConfig& e = m.moe;
  const bool shared = e.shared_expert_intermediate_size > 0;
  if (m.qk_norm && shared) return "model.qk_norm (Qwen3-MoE's) and a shared expert (Qwen2-MoE's)";
  if (m.qk_norm || shared) return "";
  if (!e.norm_topk_prob) return "neither model.qk_norm, a shared expert, nor model.moe.norm_topk_prob";
  if (static_cast<int64_t>(m.sparse_layers().size()) != m.n_layer)
    return "dense layers (model.moe.mlp_only_layers, decoder_sparse_step) but neither model.qk_norm nor a shared "
           "expert";
  return "";
}
}  // namespace

const HfNameMap& hf_map(const ModelConfig& model) {
  if (model.arch != ModelArch::kLlama) return gpt2_hf_map();
  if (!model.moe.enabled()) return model.qk_norm ? qwen3_hf_map() : llama_hf_map();
  SPMD_CHECK(model.moe.expert_bias_update_rate == 0,
             "model.moe.expert_bias_update_rate = {}: the auxiliary-loss-free choice bias has no place in a Qwen3-MoE, "
             "Qwen2-MoE or Mixtral folder (their routers have no bias); set it to 0 to import or export",
             model.moe.expert_bias_update_rate);
  const std::string why = no_expert_family(model);
  SPMD_CHECK(why.empty(), "model.moe: experts with {} match no Hugging Face family: Qwen3-MoE needs model.qk_norm, "
             "Qwen2-MoE a shared expert (model.moe.shared_expert_intermediate_size), Mixtral every layer sparse and "
             "model.moe.norm_topk_prob", why);
  if (model.qk_norm) return qwen3_moe_hf_map();
  return model.moe.shared_expert_intermediate_size > 0 ? qwen2_moe_hf_map() : mixtral_hf_map();
}

std::vector<std::string> hf_name_spellings(const HfNameMap& map, const std::string& hf) {
  std::vector<std::string> names{hf};
  for (const auto& [ours, alias] : map.block_aliases) {
    const size_t at = hf.find(ours);
    if (at != std::string::npos) names.push_back(hf.substr(0, at) + alias + hf.substr(at + ours.size()));
  }
  const size_t spelled = names.size();
  for (size_t i = 0; i < spelled; ++i)
    if (names[i].rfind(map.prefix, 0) == 0 && !map.prefix.empty()) names.push_back(names[i].substr(map.prefix.size()));
  return names;
}

std::string hf_name(const HfNameMap& map, const std::string& param) {
  for (const auto& [ours, theirs] : map.unprefixed)
    if (ours == param) return theirs;
  for (const auto& [ours, theirs] : map.renamed)
    if (ours == param) return map.prefix + theirs;
  const size_t dot = param.find('.', 2);
  if (param.rfind("h.", 0) == 0 && dot != std::string::npos) {  // h.{l}.rest
    std::string rest = param.substr(dot);
    for (const auto& [ours, theirs] : map.block_renamed)
      if (rest == ours) rest = theirs;
    return map.prefix + map.block_prefix + param.substr(2, dot - 2) + rest;
  }
  return map.prefix + param;
}

std::vector<int64_t> unpadded_shape(const ParamInfo& info) {
  std::vector<int64_t> shape = info.shape;
  if (info.padded_dim >= 0) shape[static_cast<size_t>(info.padded_dim)] = info.unpadded_size;
  return shape;
}

std::vector<int64_t> hf_shape(const ParamInfo& info, const HfNameMap& map) {
  const std::vector<int64_t> shape = unpadded_shape(info);
  if (info.input_dims > 0) {  // a dense weight: Conv1D's (in, out) or Linear's (out, in)
    const auto split = shape.begin() + info.input_dims;
    const int64_t in = product(shape.begin(), split), out = product(split, shape.end());
    return map.dense_out_in ? std::vector<int64_t>{out, in} : std::vector<int64_t>{in, out};
  }
  if (info.name.ends_with(".bias")) return {product(shape.begin(), shape.end())};
  return shape;
}

at::Tensor from_hf_layout(const HfNameMap& map, const ParamInfo& info, const at::Tensor& hf) {
  at::Tensor t = hf.to(at::kFloat);
  if (info.input_dims > 0 && map.dense_out_in) t = t.t();
  return t.reshape(unpadded_shape(info));
}

at::Tensor to_hf_layout(const HfNameMap& map, const ParamInfo& info, const at::Tensor& ours) {
  at::Tensor t = ours.to(at::kFloat).contiguous();
  if (info.input_dims > 0 && map.dense_out_in) {
    const std::vector<int64_t> shape = hf_shape(info, map);  // (out, in)
    return t.reshape({shape[1], shape[0]}).t().contiguous();
  }
  return t.reshape(hf_shape(info, map));
}

}  // namespace spmd
