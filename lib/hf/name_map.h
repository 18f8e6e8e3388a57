// How a model family's parameters appear in a Hugging Face checkpoint, as data: one map per
// family that both the export and the import (train.init_from) read, so each is the other's exact
// inverse. GPT-2's dense weights are (in, out) like its Conv1D already: only the attention tensors
// fold their (heads, head_dim) dims together, a reshape. Llama's nn.Linear weights are (out, in):
// our input-major weight viewed 2-D (in, out), transposed. The vocabulary has no padding. The
// Llama family's relatives differ by a few names: Qwen3 (per-head query/key norms), Qwen3-MoE,
// Qwen2-MoE (a shared expert) and Mixtral (routed experts, whose stacked weights hf_experts.h maps).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "config/config.h"
#include "model/params.h"

namespace spmd {

// One config.json size and the model.* key it must equal.
struct HfConfigSize {
  std::string hf_key;     // "n_embd"
  std::string model_key;  // "model.n_embd"
  int64_t (*value)(const ModelConfig&);
};

struct HfNameMap {
  std::string family;        // "GPT-2", for messages
  std::string architecture;  // config.json's architectures[0]: "GPT2LMHeadModel"
  std::string model_type;    // config.json's model_type: "gpt2"
  std::string prefix;        // "transformer.": what the bare names lack
  std::vector<std::pair<std::string, std::string>> renamed;     // our name -> HF name without the prefix
  std::vector<std::pair<std::string, std::string>> unprefixed;  // our name -> HF name outside the prefix
  std::string block_prefix;  // what our "h." blocks are called ("h.", "layers.")
  std::vector<std::pair<std::string, std::string>> block_renamed;  // in-block suffix: ours -> HF
  bool dense_out_in = false;  // nn.Linear's (out, in) weights: ours transposed
  std::vector<std::string> buffer_suffixes;  // tensors in the file that are not parameters
  std::string tied_head;                     // the LM head's name when it copies the embedding
  std::vector<HfConfigSize> config_sizes;    // config.json keys checked against model.*
  // Routed experts: the in-block module holding them and one expert's tensors, e.g.
  // ".mlp.experts." and {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}.
  std::string expert_module;
  std::vector<std::string> expert_tensors;  // gate, up, down
  // Another in-block spelling transformers also reads (Mixtral's ".block_sparse_moe." as ".mlp.").
  std::vector<std::pair<std::string, std::string>> block_aliases;
  int64_t default_head_dim = 0;  // config.json's head_dim when absent; 0: hidden_size / num_attention_heads
  int64_t default_kv_heads = 0;  // num_key_value_heads when absent; 0: num_attention_heads
  double default_rms_norm_eps = 1e-6;  // rms_norm_eps when absent
  double default_rope_theta = 10000;   // rope_theta when absent
};

// GPT2LMHeadModel's state dict.
const HfNameMap& gpt2_hf_map();
// LlamaForCausalLM's state dict.
const HfNameMap& llama_hf_map();
// Qwen3ForCausalLM's, Qwen3MoeForCausalLM's, Qwen2MoeForCausalLM's, MixtralForCausalLM's.
const HfNameMap& qwen3_hf_map();
const HfNameMap& qwen3_moe_hf_map();
const HfNameMap& qwen2_moe_hf_map();
const HfNameMap& mixtral_hf_map();
// The family model.* describes: GPT-2; a Llama with model.qk_norm is Qwen3; with experts, Qwen3-MoE
// (qk_norm), Qwen2-MoE (a shared expert) or Mixtral (every layer sparse, the k weights
// renormalised). UsageError naming the model.* keys when experts fit none of them.
const HfNameMap& hf_map(const ModelConfig& model);

// Our name -> the HF name ("h.0.attn.c_attn.weight" -> "transformer.h.0.attn.c_attn.weight";
// "wte" -> "transformer.wte.weight"; Llama's "h.0.attn.q.weight" -> "model.layers.0.self_attn.q_proj.weight").
std::string hf_name(const HfNameMap& map, const std::string& param);

// The names a file may use for the HF name `hf`: itself, its block_aliases' spellings, and each
// without the family's prefix (`model.`), in that order.
std::vector<std::string> hf_name_spellings(const HfNameMap& map, const std::string& hf);

// The HF shape: padding dropped, dense weights 2-D ((in, out), or (out, in) for nn.Linear),
// biases 1-D.
std::vector<int64_t> hf_shape(const ParamInfo& info, const HfNameMap& map = gpt2_hf_map());

// Our global shape without padding (the HF tensor's values viewed in our dims).
std::vector<int64_t> unpadded_shape(const ParamInfo& info);

// A whole HF tensor (any float dtype) as our float32 tensor of unpadded_shape, and back
// (contiguous, float32, hf_shape).
at::Tensor from_hf_layout(const HfNameMap& map, const ParamInfo& info, const at::Tensor& hf);
at::Tensor to_hf_layout(const HfNameMap& map, const ParamInfo& info, const at::Tensor& ours);

}  // namespace spmd
