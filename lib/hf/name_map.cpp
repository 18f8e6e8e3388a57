// The name and shape mapping between our parameters and Hugging Face's, and each family's map.
#include "hf/name_map.h"

#include <functional>
#include <numeric>

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

const HfNameMap& llama_hf_map() {
  static const HfNameMap map{
      "Llama",
      "LlamaForCausalLM",
      "llama",
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
  return map;
}

const HfNameMap& hf_map(const ModelConfig& model) {
  return model.arch == ModelArch::kLlama ? llama_hf_map() : gpt2_hf_map();
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
