// config.json in and out (see hf_config.h).
#include "hf/hf_config.h"

#include <cmath>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hf/hf_moe_config.h"
#include "hf/name_map.h"
#include "util/error.h"
#include "util/json_file.h"

namespace spmd {

namespace {

using Json = nlohmann::json;

void check_sizes(const std::string& path, const Json& j, const ModelConfig& model) {
  for (const auto& size : hf_map(model).config_sizes) {
    const std::string& key = size.hf_key;
    const std::string& ours = size.model_key;
    const int64_t value = size.value(model);
    if (!j.contains(key)) continue;
    SPMD_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() == value,
               "train.init_from: {} has {} = {} but {} = {}; set {}: {} to load it", path, key, j[key].dump(), ours,
               value, ours, j[key].dump());
  }
}

// A number of config.json (`fallback` when absent, as transformers' default) against model.*.
void check_number(const std::string& path, const Json& j, const std::string& key, double fallback,
                  const std::string& model_key, double ours) {
  const Json v = j.contains(key) ? j[key] : Json(fallback);
  SPMD_CHECK(v.is_number() && v.get<double>() == ours,
             "train.init_from: {} has {} = {}{} but {} = {}; set {}: {} to load it", path, key, v.dump(),
             j.contains(key) ? "" : " (transformers' default)", model_key, Json(ours).dump(), model_key, v.dump());
}

// The fixed parts of our GPT-2 (tanh GELU, LayerNorm eps, scaled attention, tied head).
void check_gpt2(const std::string& path, const Json& j) {
  if (j.contains("activation_function")) {
    const auto act = j["activation_function"].dump();
    SPMD_CHECK(act == "\"gelu_new\"" || act == "\"gelu_pytorch_tanh\"",
               "train.init_from: {} has activation_function = {}; spmd-train's GPT-2 uses the tanh GELU (gelu_new)",
               path, act);
  }
  for (const auto& [key, value] : std::vector<std::pair<const char*, bool>>{
           {"scale_attn_weights", true}, {"scale_attn_by_inverse_layer_idx", false}, {"tie_word_embeddings", true}})
    SPMD_CHECK(!j.contains(key) || j[key] == value, "train.init_from: {} has {} = {}; spmd-train's GPT-2 needs {}",
               path, key, j[key].dump(), value);
  if (j.contains("layer_norm_epsilon"))
    SPMD_CHECK(j["layer_norm_epsilon"].is_number() && j["layer_norm_epsilon"].get<double>() == 1e-5,
               "train.init_from: {} has layer_norm_epsilon = {}; spmd-train's GPT-2 uses 1e-05", path,
               j["layer_norm_epsilon"].dump());
}

// rope_theta and the rope scaling, from rope_parameters (transformers 5) or the top level.
struct HfRope {
  Json theta;    // absent: transformers' default (the family's default_rope_theta)
  Json scaling;  // null, or {rope_type, factor, ...}
  std::string scaling_key;  // where it was, for messages
};

HfRope rope_of(const Json& j) {
  HfRope rope;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const Json& p = j["rope_parameters"];
    rope.theta = p.contains("rope_theta") ? p["rope_theta"] : Json();
    rope.scaling = p;
    rope.scaling_key = "rope_parameters";
  } else {
    rope.scaling = j.value("rope_scaling", Json());
    rope.scaling_key = "rope_scaling";
  }
  if (rope.theta.is_null() && j.contains("rope_theta")) rope.theta = j["rope_theta"];
  return rope;
}

void check_rope(const std::string& path, const Json& j, const ModelConfig& model, double default_theta) {
  const HfRope rope = rope_of(j);
  check_number(path, rope.theta.is_null() ? Json::object() : Json{{"rope_theta", rope.theta}}, "rope_theta",
               default_theta, "model.rope_theta", model.rope_theta);
  const Json& s = rope.scaling;
  const std::string type = s.is_object() ? s.value("rope_type", s.value("type", "default")) : "default";
  SPMD_CHECK(type == "default" || type == "llama3",
             "train.init_from: {} has {}.rope_type = \"{}\"; spmd-train's rotary embeddings take Llama 3's "
             "scaling (\"llama3\") or none",
             path, rope.scaling_key, type);
  if (type == "default") {
    SPMD_CHECK(model.rope_scaling.factor == 0,
               "train.init_from: {} has no rope scaling but model.rope_scaling is set; remove model.rope_scaling", path);
    return;
  }
  SPMD_CHECK(model.rope_scaling.factor > 0,
             "train.init_from: {} has {} {} but model.rope_scaling is not set; set model.rope_scaling: {{factor: {}, "
             "low_freq_factor: {}, high_freq_factor: {}, original_max_position_embeddings: {}}}",
             path, rope.scaling_key, s.dump(), s.value("factor", Json()).dump(),
             s.value("low_freq_factor", Json()).dump(), s.value("high_freq_factor", Json()).dump(),
             s.value("original_max_position_embeddings", Json()).dump());
  const RopeScaling& r = model.rope_scaling;
  const std::vector<std::pair<std::string, double>> ours{
      {"factor", r.factor},
      {"low_freq_factor", r.low_freq_factor},
      {"high_freq_factor", r.high_freq_factor},
      {"original_max_position_embeddings", static_cast<double>(r.original_max_position_embeddings)}};
  for (const auto& [key, value] : ours) {
    SPMD_CHECK(s.contains(key), "train.init_from: {} has {} without {}", path, rope.scaling_key, key);
    check_number(path, Json{{rope.scaling_key + "." + key, s[key]}}, rope.scaling_key + "." + key, 0,
                 "model.rope_scaling." + key, value);
  }
}

void check_llama(const std::string& path, Json j, const ModelConfig& model) {
  check_hf_family_config(path, j, model);  // the folder's family is model.*'s
  const HfNameMap& map = hf_map(model);
  if (!j.contains("num_key_value_heads") && j.contains("num_attention_heads"))  // transformers' default
    j["num_key_value_heads"] = map.default_kv_heads > 0 ? Json(map.default_kv_heads) : j["num_attention_heads"];
  const bool head_dim_absent = !j.contains("head_dim") || j["head_dim"].is_null();
  if (head_dim_absent && map.default_head_dim > 0) j["head_dim"] = map.default_head_dim;
  check_sizes(path, j, model);
  if (j.contains("head_dim") && !j["head_dim"].is_null())
    SPMD_CHECK(j["head_dim"] == model.head_dim(),
               "train.init_from: {} has head_dim = {}{} but the model's heads are {} wide (model.head_dim, or "
               "model.n_embd / model.n_head without it); set model.head_dim: {} to load it",
               path, j["head_dim"].dump(), head_dim_absent ? " (transformers' default)" : "", model.head_dim(),
               j["head_dim"].dump());
  check_number(path, j, "rms_norm_eps", map.default_rms_norm_eps, "model.rms_norm_eps", model.rms_norm_eps);
  check_rope(path, j, model, map.default_rope_theta);
  const bool tied = j.value("tie_word_embeddings", false);
  SPMD_CHECK(tied == model.tie_embeddings, "train.init_from: {} has tie_word_embeddings = {} but "
             "model.tie_embeddings = {}; set model.tie_embeddings: {} to load it", path, tied, model.tie_embeddings,
             tied);
  SPMD_CHECK(j.value("hidden_act", "silu") == "silu",
             "train.init_from: {} has hidden_act = {}; spmd-train's Llama uses SwiGLU (silu)", path,
             j["hidden_act"].dump());
  for (const char* key : {"attention_bias", "mlp_bias"})
    SPMD_CHECK(!j.value(key, false), "train.init_from: {} has {} = true; spmd-train's Llama has no biases", path, key);
}

}  // namespace

void check_hf_config_json(const std::string& path, const ModelConfig& model) {
  const Json j = read_json_file(path, "train.init_from: config");
  SPMD_CHECK(j.is_object(), "train.init_from: {} is not a JSON object", path);
  try {
    if (model.arch == ModelArch::kLlama) return check_llama(path, j, model);
    check_sizes(path, j, model);
    check_gpt2(path, j);
  } catch (const Json::exception& e) {  // a key of the wrong type
    throw UsageError(fmt::format("train.init_from: {}: unexpected value: {}", path, e.what()));
  }
}

Json hf_config_json(const ModelConfig& m) {
  const HfNameMap& map = hf_map(m);
  Json j = {{"architectures", {map.architecture}}, {"model_type", map.model_type}, {"vocab_size", m.vocab_size},
            {"torch_dtype", "float32"}, {"tie_word_embeddings", m.tie_embeddings}};
  if (m.arch != ModelArch::kLlama) {
    j.update({{"n_positions", m.block_size}, {"n_embd", m.n_embd}, {"n_layer", m.n_layer}, {"n_head", m.n_head},
              {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5}, {"resid_pdrop", 0.0},
              {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}});
    return j;
  }
  Json scaling = nullptr;
  if (m.rope_scaling.factor > 0)
    scaling = {{"rope_type", "llama3"},
               {"factor", m.rope_scaling.factor},
               {"low_freq_factor", m.rope_scaling.low_freq_factor},
               {"high_freq_factor", m.rope_scaling.high_freq_factor},
               {"original_max_position_embeddings", m.rope_scaling.original_max_position_embeddings}};
  // The top-level layout published folders use; transformers 5 reads it too.
  j.update({{"hidden_size", m.n_embd}, {"num_hidden_layers", m.n_layer}, {"num_attention_heads", m.n_head},
            {"num_key_value_heads", m.kv_heads()}, {"head_dim", m.head_dim()}, {"intermediate_size", m.mlp_size()},
            {"hidden_act", "silu"}, {"max_position_embeddings", m.block_size}, {"rms_norm_eps", m.rms_norm_eps},
            {"rope_theta", m.rope_theta}, {"rope_scaling", scaling}, {"attention_bias", false},
            {"mlp_bias", false}, {"attention_dropout", 0.0}});
  add_hf_family_config(m, map, j);
  return j;
}

}  // namespace spmd
