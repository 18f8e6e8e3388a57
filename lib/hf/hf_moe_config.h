// config.json's keys for the Llama family's relatives (Qwen3, Qwen3-MoE, Qwen2-MoE, Mixtral), in
// and out: which family a folder is, the per-head query/key norms, and the experts' keys
// (num_experts or num_local_experts, num_experts_per_tok, norm_topk_prob, mlp_only_layers,
// decoder_sparse_step, the shared expert), against model.* (model.qk_norm, model.moe).
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "config/config.h"
#include "hf/name_map.h"

namespace spmd {

// UsageError naming config.json, its key and the model.* key to set when the folder's family or
// its expert keys differ from model.*, or when it has what spmd-train's attention lacks (q/k/v
// biases, a sliding window, router noise).
void check_hf_family_config(const std::string& path, const nlohmann::json& j, const ModelConfig& model);

// Adds the family's keys to the Llama config.json `j` that hf_config_json wrote.
void add_hf_family_config(const ModelConfig& model, const HfNameMap& map, nlohmann::json& j);

}  // namespace spmd
