// A Hugging Face config.json against model.* (train.init_from), and the config.json our export
// writes, per family: GPT-2's (GPT2LMHeadModel) and the Llama family's (LlamaForCausalLM, in either
// layout transformers writes: transformers 5's rope_parameters, or the top-level rope_theta and
// rope_scaling published folders hold; Qwen3's, Qwen3-MoE's, Qwen2-MoE's and Mixtral's keys beside
// them: hf_moe_config.h).
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "config/config.h"

namespace spmd {

// UsageError naming config.json, its key and the model.* key to set when they differ.
void check_hf_config_json(const std::string& path, const ModelConfig& model);

// The config.json from_pretrained needs to rebuild `model` (float32 weights).
nlohmann::json hf_config_json(const ModelConfig& model);

}  // namespace spmd
