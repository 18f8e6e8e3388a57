// Unit tests for the Hugging Face maps of the Llama family's relatives: which family model.*
// describes (Qwen3, Qwen3-MoE, Qwen2-MoE, Mixtral), their names, the routed experts read from
// one tensor per expert or from transformers 5's stacked gate_up_proj / down_proj (any range of
// experts), and config.json's family and expert keys against model.* (refusals name the
// file and the key).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "hf/hf_experts.h"
#include "hf/hf_import.h"
#include "hf/name_map.h"

#include "doctest_check.h"

#include "test_support.h"
#include "usage_error.h"

using spmd::test::usage_error_of;
using Json = nlohmann::json;

namespace {

// A Qwen3-MoE shape: 3 layers, layer 1 dense, 8 experts of width 16.
spmd::Config qwen3_moe_config(const std::string& init_from) {
  spmd::Config c;
  spmd::ModelConfig& m = c.model;
  m.arch = spmd::ModelArch::kLlama;
  m.vocab_size = 67, m.block_size = 16, m.n_layer = 3, m.n_head = 4, m.n_kv_head = 2, m.n_embd = 32;
  m.intermediate_size = 48, m.bias = false, m.tie_embeddings = false, m.rms_norm_eps = 1e-6, m.qk_norm = true;
  m.moe.num_experts = 8, m.moe.num_experts_per_tok = 2, m.moe.moe_intermediate_size = 16;
  m.moe.mlp_only_layers = {1};
  c.train.init_from = init_from;
  return c;
}

// config.json as transformers 5 writes a Qwen3-MoE (num_local_experts).
Json qwen3_moe_json() {
  return {{"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"vocab_size", 67},
          {"hidden_size", 32}, {"num_hidden_layers", 3}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"head_dim", 8}, {"intermediate_size", 48}, {"rms_norm_eps", 1e-6}, {"tie_word_embeddings", false},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}, {"num_local_experts", 8},
          {"num_experts_per_tok", 2}, {"moe_intermediate_size", 16}, {"norm_topk_prob", false},
          {"mlp_only_layers", {1}}, {"decoder_sparse_step", 1}, {"use_sliding_window", false}};
}

// Our parameters of `model`, random, and the one-tensor-per-expert file of them.
std::vector<at::Tensor> write_per_expert_folder(const spmd::test::TempDir& dir, const spmd::ModelConfig& model) {
  const spmd::HfNameMap& map = spmd::hf_map(model);
  std::vector<spmd::NamedTensor> out;
  std::vector<at::Tensor> ours;
  for (const auto& info : spmd::param_table(model, model.vocab_size)) {
    ours.push_back(at::randn(info.shape));
    if (spmd::is_expert_weights(info)) {
      for (auto& t : spmd::expert_hf_tensors(map, info, ours.back())) out.push_back(std::move(t));
    } else {
      out.push_back({spmd::hf_name(map, info.name), spmd::to_hf_layout(map, info, ours.back())});
    }
  }
  spmd::write_safetensors(dir.file("model.safetensors"), out);
  return ours;
}

}  // namespace

TEST_CASE("hf experts names: the family model.* describes and its names") {
  spmd::ModelConfig m = qwen3_moe_config("").model;
  CHECK(spmd::hf_map(m).architecture == "Qwen3MoeForCausalLM");
  const spmd::HfNameMap& qwen3_moe = spmd::hf_map(m);
  CHECK(spmd::hf_name(qwen3_moe, "h.0.moe.router.weight") == "model.layers.0.mlp.gate.weight");
  CHECK(spmd::hf_name(qwen3_moe, "h.2.attn.q_norm.weight") == "model.layers.2.self_attn.q_norm.weight");
  m.moe = {};
  CHECK(spmd::hf_map(m).architecture == "Qwen3ForCausalLM");
  m.qk_norm = false;
  CHECK(spmd::hf_map(m).architecture == "LlamaForCausalLM");
  m = qwen3_moe_config("").model;
  m.qk_norm = false, m.moe.shared_expert_intermediate_size = 24;
  const spmd::HfNameMap& qwen2_moe = spmd::hf_map(m);
  CHECK(qwen2_moe.architecture == "Qwen2MoeForCausalLM");
  CHECK(spmd::hf_name(qwen2_moe, "h.0.moe.shared_gate.weight") == "model.layers.0.mlp.shared_expert_gate.weight");
  CHECK(spmd::hf_name(qwen2_moe, "h.0.moe.shared.down.weight") ==
        "model.layers.0.mlp.shared_expert.down_proj.weight");
  m.moe.shared_expert_intermediate_size = 0, m.moe.norm_topk_prob = true;
  CHECK(usage_error_of([&] { spmd::hf_map(m); }).find("model.moe.mlp_only_layers") != std::string::npos);
  m.moe.mlp_only_layers = {};
  const spmd::HfNameMap& mixtral = spmd::hf_map(m);
  CHECK(mixtral.architecture == "MixtralForCausalLM");
  CHECK(spmd::hf_name(mixtral, "h.1.moe.router.weight") == "model.layers.1.block_sparse_moe.gate.weight");
  CHECK((spmd::hf_name_spellings(mixtral, "model.layers.1.block_sparse_moe.gate.weight") ==
         std::vector<std::string>{"model.layers.1.block_sparse_moe.gate.weight", "model.layers.1.mlp.gate.weight",
                                  "layers.1.block_sparse_moe.gate.weight", "layers.1.mlp.gate.weight"}));
  m.moe.norm_topk_prob = false;
  CHECK(usage_error_of([&] { spmd::hf_map(m); }).find("model.moe.norm_topk_prob") != std::string::npos);
  m.qk_norm = true, m.moe.shared_expert_intermediate_size = 24;
  CHECK(usage_error_of([&] { spmd::hf_map(m); }).find("model.qk_norm") != std::string::npos);
  m = qwen3_moe_config("").model;
  m.moe.expert_bias_update_rate = 0.001;  // the choice bias: no family's folder holds it
  CHECK(usage_error_of([&] { spmd::hf_map(m); }).find("model.moe.expert_bias_update_rate") != std::string::npos);
}

TEST_CASE("hf experts layouts: one tensor per expert and the stacked gate_up_proj read the same experts") {
  spmd::test::TempDir dir;
  const spmd::ModelConfig m = qwen3_moe_config("").model;
  const spmd::HfNameMap& map = spmd::hf_map(m);
  const int64_t E = 8, C = 32, I = 16;
  const at::Tensor gate = at::randn({E, C, I}), up = at::randn({E, C, I}), down = at::randn({E, I, C});
  const spmd::ParamInfo gate_info{"h.2.moe.experts.gate", {E, C, I}, {"expert", "embed", "mlp"}};
  const spmd::ParamInfo up_info{"h.2.moe.experts.up", {E, C, I}, {"expert", "embed", "mlp"}};
  const spmd::ParamInfo down_info{"h.2.moe.experts.down", {E, I, C}, {"expert", "mlp", "embed"}};
  std::vector<spmd::NamedTensor> per_expert = spmd::expert_hf_tensors(map, gate_info, gate);
  CHECK(per_expert[3].name == "model.layers.2.mlp.experts.3.gate_proj.weight");
  CHECK(at::equal(per_expert[3].tensor, gate[3].t()));  // nn.Linear's (out, in)
  for (auto& t : spmd::expert_hf_tensors(map, up_info, up)) per_expert.push_back(std::move(t));
  for (auto& t : spmd::expert_hf_tensors(map, down_info, down)) per_expert.push_back(std::move(t));
  spmd::write_safetensors(dir.file("per_expert.safetensors"), per_expert);
  // transformers 5's in-memory layout: gate rows then up rows, (E, 2I, C); down (E, C, I). (bf16
  // files: the oracle, tests/oracle/test_hf_experts.py.)
  const at::Tensor gate_up = at::cat({gate.transpose(1, 2), up.transpose(1, 2)}, 1).contiguous();
  spmd::write_safetensors(dir.file("stacked.safetensors"),
                          {{"model.layers.2.mlp.experts.gate_up_proj", gate_up},
                           {"model.layers.2.mlp.experts.down_proj", down.transpose(1, 2).contiguous()}});
  const spmd::HfWeights per_file(dir.file("per_expert.safetensors")), stacked_file(dir.file("stacked.safetensors"));
  const std::vector<std::pair<spmd::ParamInfo, at::Tensor>> weights{{gate_info, gate}, {up_info, up}, {down_info, down}};
  for (const auto& [info, ours] : weights) {
    CAPTURE(info.name);
    const spmd::HfExpertSource a = spmd::find_expert_source(map, per_file, info);
    CHECK(!a.stacked);
    CHECK(a.names.size() == 8);
    CHECK(at::equal(spmd::read_experts(per_file, a, 2, 3), ours.narrow(0, 2, 3)));
    const spmd::HfExpertSource b = spmd::find_expert_source(map, stacked_file, info);
    CHECK(b.stacked);
    CHECK(at::equal(spmd::read_experts(stacked_file, b, 5, 3), ours.narrow(0, 5, 3)));
  }
  const spmd::ParamInfo wider{"h.2.moe.experts.up", {E, C, 2 * I}, {"expert", "embed", "mlp"}};
  CHECK(usage_error_of([&] { spmd::find_expert_source(map, stacked_file, wider); })
            .find("'model.layers.2.mlp.experts.gate_up_proj' has shape [8, 32, 32] but the model config needs "
                  "[8, 64, 32]") != std::string::npos);
  const spmd::ParamInfo elsewhere{"h.1.moe.experts.up", {E, C, I}, {"expert", "embed", "mlp"}};
  CHECK(usage_error_of([&] { spmd::find_expert_source(map, per_file, elsewhere); })
            .find("no tensor 'model.layers.1.mlp.experts.0.up_proj.weight'") != std::string::npos);
}

TEST_CASE("hf experts check: a Qwen3-MoE folder, either expert-count spelling, each differing key named") {
  spmd::test::TempDir dir;
  const spmd::Config c = qwen3_moe_config(dir.path());
  write_per_expert_folder(dir, c.model);
  Json j = qwen3_moe_json();
  spmd::test::write_file(dir.file("config.json"), j.dump());
  CHECK_NOTHROW(spmd::check_hf_checkpoint(c));
  j.erase("num_local_experts");
  j["num_experts"] = 8;  // as published folders spell it
  spmd::test::write_file(dir.file("config.json"), j.dump());
  CHECK_NOTHROW(spmd::check_hf_checkpoint(c));
  auto refusal = [&](void (*change)(spmd::ModelConfig&)) {
    spmd::Config changed = c;
    change(changed.model);
    return usage_error_of([&] { spmd::check_hf_checkpoint(changed); });
  };
  const std::string msg = refusal([](spmd::ModelConfig& m) { m.moe.num_experts_per_tok = 4; });
  CHECK(msg.find(dir.file("config.json")) != std::string::npos);
  CHECK(msg.find("num_experts_per_tok = 2 but model.moe.num_experts_per_tok = 4") != std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.moe.norm_topk_prob = true; }).find("model.moe.norm_topk_prob") !=
        std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.moe.mlp_only_layers = {}; }).find("model.moe.mlp_only_layers") !=
        std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.moe.moe_intermediate_size = 24; })
            .find("model.moe.moe_intermediate_size") != std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.qk_norm = false; }).find("model_type = \"qwen3_moe\" (Qwen3-MoE)") !=
        std::string::npos);
  j["head_dim"] = 16;
  spmd::test::write_file(dir.file("config.json"), j.dump());
  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(c); }).find("head_dim = 16") != std::string::npos);
  j["head_dim"] = 8, j["use_sliding_window"] = true;
  spmd::test::write_file(dir.file("config.json"), j.dump());
  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(c); }).find("use_sliding_window") != std::string::npos);
}

TEST_CASE("hf experts check: a Mixtral folder, its defaults for absent keys, its refusals") {
  spmd::test::TempDir dir;
  spmd::Config c = qwen3_moe_config(dir.path());
  spmd::ModelConfig& m = c.model;
  m.qk_norm = false, m.moe.mlp_only_layers = {}, m.moe.norm_topk_prob = true, m.rms_norm_eps = 1e-5, m.rope_theta = 1e6;
  write_per_expert_folder(dir, m);
  // Mixtral's config.json without rms_norm_eps and rope_theta: its defaults, 1e-5 and 1e6.
  Json j = {{"architectures", {"MixtralForCausalLM"}}, {"model_type", "mixtral"}, {"vocab_size", 67},
            {"hidden_size", 32}, {"num_hidden_layers", 3}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
            {"intermediate_size", 16}, {"tie_word_embeddings", false}, {"num_local_experts", 8},
            {"num_experts_per_tok", 2}, {"sliding_window", nullptr}};
  spmd::test::write_file(dir.file("config.json"), j.dump());
  CHECK_NOTHROW(spmd::check_hf_checkpoint(c));
  spmd::Config llama_eps = c;
  llama_eps.model.rms_norm_eps = 1e-6;
  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(llama_eps); })
            .find("rms_norm_eps = 1e-05 (transformers' default)") != std::string::npos);
  spmd::Config wider = c;  // Mixtral's experts are intermediate_size wide
  wider.model.moe.moe_intermediate_size = 24;
  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(wider); })
            .find("intermediate_size = 16 but model.moe.moe_intermediate_size = 24") != std::string::npos);
  j["router_jitter_noise"] = 0.1;
  spmd::test::write_file(dir.file("config.json"), j.dump());
  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(c); }).find("router_jitter_noise") != std::string::npos);
  j["router_jitter_noise"] = 0.0, j["sliding_window"] = 8;  // shorter than model.block_size 16
  spmd::test::write_file(dir.file("config.json"), j.dump());
  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(c); }).find("sliding_window = 8") != std::string::npos);
  j["sliding_window"] = nullptr, j["model_type"] = "qwen2_moe";
  spmd::test::write_file(dir.file("config.json"), j.dump());
  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(c); })
            .find("model_type = \"qwen2_moe\" (Qwen2-MoE), but model.* describes Mixtral") != std::string::npos);
}
