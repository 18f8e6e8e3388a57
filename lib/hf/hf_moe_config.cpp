// config.json's family and expert keys (see hf_moe_config.h).
#include "hf/hf_moe_config.h"

#include <vector>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace spmd {

namespace {

using Json = nlohmann::json;

// What a family needs of model.*, for the message when a folder is of another family than model.*.
std::string family_keys_hint(const std::string& model_type) {
  if (model_type == "llama") return "model.qk_norm: false and no model.moe";
  if (model_type == "qwen3") return "model.qk_norm: true and no model.moe";
  if (model_type == "qwen3_moe") return "model.qk_norm: true and model.moe (its num_experts, ...)";
  if (model_type == "qwen2_moe")
    return "model.qk_norm: false and model.moe with shared_expert_intermediate_size (Qwen2-MoE's shared expert)";
  return "model.qk_norm: false and model.moe with norm_topk_prob: true and every layer sparse";  // mixtral
}

// The folder's family (by model_type; absent: model.*'s) must be the one model.* describes.
void check_model_type(const std::string& path, const Json& j, const ModelConfig& model) {
  const HfNameMap* ours = nullptr;
  std::string why;  // why model.*'s experts fit no family
  try {
    ours = &hf_map(model);
  } catch (const UsageError& e) {
    why = e.what();
  }
  if (!j.contains("model_type")) {
    if (!ours) throw UsageError(why);
    return;
  }
  const std::string type = j["model_type"].get<std::string>();
  for (const HfNameMap* family : {&llama_hf_map(), &qwen3_hf_map(), &qwen3_moe_hf_map(), &qwen2_moe_hf_map(),
                                  &mixtral_hf_map()}) {
    if (family->model_type != type) continue;
    SPMD_CHECK(family == ours, "train.init_from: {} has model_type = \"{}\" ({}), but {}; set {} to load it", path,
               type, family->family, ours ? "model.* describes " + ours->family : why, family_keys_hint(type));
    return;
  }
  throw UsageError(fmt::format("train.init_from: {} has model_type = \"{}\"; model.arch: llama reads Llama, Qwen3, "
                               "Qwen3-MoE, Qwen2-MoE and Mixtral folders", path, type));
}

// config.json's value of `key` (`fallback` when absent: transformers' default) must equal ours.
void check_moe_value(const std::string& path, const Json& j, const std::string& key, const Json& fallback,
                     const std::string& model_key, const Json& ours) {
  const Json v = j.contains(key) && !j[key].is_null() ? j[key] : fallback;
  SPMD_CHECK(v == ours, "train.init_from: {} has {} = {}{} but {} = {}; set {}: {} to load it", path, key, v.dump(),
             j.contains(key) ? "" : " (transformers' default)", model_key, ours.dump(), model_key, v.dump());
}

// The expert count: num_experts in published folders, num_local_experts in transformers 5's and
// Mixtral's; both must agree when both are there.
void check_expert_count(const std::string& path, const Json& j, const ModelConfig& m, const HfNameMap& map) {
  if (j.contains("num_experts") && j.contains("num_local_experts"))
    SPMD_CHECK(j["num_experts"] == j["num_local_experts"], "train.init_from: {} has num_experts = {} but "
               "num_local_experts = {}", path, j["num_experts"].dump(), j["num_local_experts"].dump());
  const std::string key = j.contains("num_experts") ? "num_experts" : "num_local_experts";
  const int64_t fallback = map.model_type == "qwen3_moe" ? 128 : map.model_type == "qwen2_moe" ? 60 : 8;
  check_moe_value(path, j, key, fallback, "model.moe.num_experts", m.moe.num_experts);
  const int64_t k_fallback = map.model_type == "qwen3_moe" ? 8 : map.model_type == "qwen2_moe" ? 4 : 2;
  check_moe_value(path, j, "num_experts_per_tok", k_fallback, "model.moe.num_experts_per_tok",
                  m.moe.num_experts_per_tok);
}

// Qwen's placement of the sparse layers and the renormalisation (Mixtral's are fixed: hf_map).
void check_qwen_experts(const std::string& path, const Json& j, const ModelConfig& m) {
  check_moe_value(path, j, "norm_topk_prob", false, "model.moe.norm_topk_prob", m.moe.norm_topk_prob);
  check_moe_value(path, j, "decoder_sparse_step", 1, "model.moe.decoder_sparse_step", m.moe.decoder_sparse_step);
  check_moe_value(path, j, "mlp_only_layers", Json::array(), "model.moe.mlp_only_layers", m.moe.mlp_only_layers);
}

// What spmd-train's attention and router lack.
void check_family_extras(const std::string& path, const Json& j, const ModelConfig& m, const HfNameMap& map) {
  if (map.model_type == "qwen2_moe")  // transformers' default is true
    SPMD_CHECK(j.contains("qkv_bias") && j["qkv_bias"] == false, "train.init_from: {} has qkv_bias = {}; spmd-train's "
               "Llama family has no query/key/value biases", path, j.value("qkv_bias", Json(true)).dump());
  if (map.model_type == "mixtral") {
    const Json window = j.value("sliding_window", Json());
    SPMD_CHECK(window.is_null() || (window.is_number_integer() && window.get<int64_t>() >= m.block_size),
               "train.init_from: {} has sliding_window = {}, shorter than model.block_size = {}; spmd-train's "
               "attention sees the whole window", path, window.dump(), m.block_size);
    SPMD_CHECK(j.value("router_jitter_noise", 0.0) == 0.0, "train.init_from: {} has router_jitter_noise = {}; "
               "spmd-train's router adds no noise", path, j["router_jitter_noise"].dump());
  } else {
    SPMD_CHECK(!j.value("use_sliding_window", false), "train.init_from: {} has use_sliding_window = true; "
               "spmd-train's attention sees the whole window", path);
  }
}

}  // namespace

void check_hf_family_config(const std::string& path, const Json& j, const ModelConfig& model) {
  check_model_type(path, j, model);
  const HfNameMap& map = hf_map(model);
  check_family_extras(path, j, model, map);
  if (map.expert_module.empty()) return;
  check_expert_count(path, j, model, map);
  if (map.model_type != "mixtral") check_qwen_experts(path, j, model);
}

void add_hf_family_config(const ModelConfig& m, const HfNameMap& map, Json& j) {
  if (map.model_type == "llama") return;
  j.erase("mlp_bias");
  if (map.model_type == "mixtral") {
    j.update({{"num_local_experts", m.moe.num_experts}, {"num_experts_per_tok", m.moe.num_experts_per_tok},
              {"intermediate_size", m.expert_mlp_size()}, {"router_aux_loss_coef", m.moe.router_aux_loss_coef},
              {"router_jitter_noise", 0.0}, {"sliding_window", nullptr}, {"output_router_logits", false}});
    return;
  }
  j.update({{"use_sliding_window", false}, {"sliding_window", nullptr}});
  if (map.model_type == "qwen2_moe") {
    j.update({{"qkv_bias", false}, {"shared_expert_intermediate_size", m.moe.shared_expert_intermediate_size}});
    j.erase("attention_bias");
  }
  if (map.expert_module.empty()) return;  // Qwen3's dense models
  j.update({{"num_experts", m.moe.num_experts}, {"num_experts_per_tok", m.moe.num_experts_per_tok},
            {"moe_intermediate_size", m.expert_mlp_size()}, {"norm_topk_prob", m.moe.norm_topk_prob},
            {"router_aux_loss_coef", m.moe.router_aux_loss_coef}, {"mlp_only_layers", m.moe.mlp_only_layers},
            {"decoder_sparse_step", m.moe.decoder_sparse_step}, {"output_router_logits", false}});
}

}  // namespace spmd
