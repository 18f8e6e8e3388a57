// Unit tests for the Hugging Face Llama mapping and for check_hf_checkpoint with model.arch llama:
// LlamaForCausalLM's names and (out, in) layouts, a sharded folder, config.json in both layouts,
// and every refusal naming the file and the model.* key.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "hf/hf_import.h"
#include "hf/name_map.h"

#include "doctest_check.h"

#include "test_support.h"
#include "usage_error.h"

using spmd::test::usage_error_of;
using Json = nlohmann::json;

namespace {

spmd::Config llama_config(const std::string& init_from) {
  spmd::Config c;
  spmd::ModelConfig& m = c.model;
  m.arch = spmd::ModelArch::kLlama;
  m.vocab_size = 67, m.block_size = 16, m.n_layer = 2, m.n_head = 4, m.n_kv_head = 2, m.n_embd = 32;
  m.intermediate_size = 48, m.bias = false, m.tie_embeddings = false, m.rope_theta = 500000, m.rms_norm_eps = 1e-5;
  m.rope_scaling = {8, 1, 4, 8192};
  c.train.init_from = init_from;
  return c;
}

// config.json as transformers 5 writes it (rope_parameters, dtype, head_dim).
Json config_v5() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 67},
          {"hidden_size", 32}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"head_dim", 8}, {"intermediate_size", 48}, {"rms_norm_eps", 1e-5}, {"max_position_embeddings", 64},
          {"tie_word_embeddings", false}, {"hidden_act", "silu"}, {"dtype", "bfloat16"},
          {"rope_parameters", {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                               {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                               {"original_max_position_embeddings", 8192}}}};
}

// The same in the layout published folders use (top-level rope_theta, rope_scaling, torch_dtype).
Json config_published() {
  Json j = config_v5();
  Json rope = j["rope_parameters"];
  j.erase("rope_parameters"), j.erase("dtype"), j.erase("head_dim");
  j["rope_theta"] = rope["rope_theta"];
  rope.erase("rope_theta");
  j["rope_scaling"] = rope;
  j["torch_dtype"] = "bfloat16";
  return j;
}

// The model's tensors in HF layout, split over two shards named by model.safetensors.index.json.
void write_sharded(const spmd::test::TempDir& dir, const spmd::ModelConfig& model) {
  std::vector<spmd::NamedTensor> shards[2];
  Json weight_map = Json::object();
  int i = 0;
  for (const auto& info : spmd::param_table(model, model.vocab_size)) {
    const std::string name = spmd::hf_name(spmd::llama_hf_map(), info.name);
    const int shard = i++ % 2;
    shards[shard].push_back({name, at::randn(spmd::hf_shape(info, spmd::llama_hf_map()))});
    weight_map[name] = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
  }
  for (int s = 0; s < 2; ++s)
    spmd::write_safetensors(dir.file("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors"), shards[s]);
  spmd::test::write_file(dir.file("model.safetensors.index.json"),
                         Json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
}

}  // namespace

TEST_CASE("hf llama layout: LlamaForCausalLM names, nn.Linear (out, in) shapes, exact round trip") {
  const spmd::HfNameMap& map = spmd::llama_hf_map();
  CHECK(spmd::hf_name(map, "wte") == "model.embed_tokens.weight");
  CHECK(spmd::hf_name(map, "lm_head") == "lm_head.weight");
  CHECK(spmd::hf_name(map, "ln_f.weight") == "model.norm.weight");
  CHECK(spmd::hf_name(map, "h.1.attn.q.weight") == "model.layers.1.self_attn.q_proj.weight");
  CHECK(spmd::hf_name(map, "h.0.mlp_norm.weight") == "model.layers.0.post_attention_layernorm.weight");
  CHECK(spmd::hf_name(map, "h.12.mlp.down.weight") == "model.layers.12.mlp.down_proj.weight");
  const spmd::ModelConfig m = llama_config("").model;
  for (const auto& info : spmd::param_table(m, 68)) {
    CAPTURE(info.name);
    const auto shape = spmd::hf_shape(info, map);
    if (info.name == "wte" || info.name == "lm_head") CHECK(shape == std::vector<int64_t>{67, 32});
    if (info.name == "h.1.attn.q.weight") CHECK(shape == std::vector<int64_t>{32, 32});
    if (info.name == "h.1.attn.k.weight") CHECK(shape == std::vector<int64_t>{16, 32});
    if (info.name == "h.1.attn.o.weight") CHECK(shape == std::vector<int64_t>{32, 32});
    if (info.name == "h.1.mlp.gate.weight") CHECK(shape == std::vector<int64_t>{48, 32});
    if (info.name == "h.1.mlp.down.weight") CHECK(shape == std::vector<int64_t>{32, 48});
    const at::Tensor ours = at::randn(spmd::unpadded_shape(info));
    const at::Tensor hf = spmd::to_hf_layout(map, info, ours);
    CHECK(hf.sizes().vec() == shape);
    CHECK(at::equal(spmd::from_hf_layout(map, info, hf), ours));
    CHECK(at::equal(spmd::from_hf_layout(map, info, hf.to(at::kBFloat16)), ours.to(at::kBFloat16).to(at::kFloat)));
    if (info.name == "h.0.attn.k.weight")  // x @ W: HF's k_proj.weight is W^T, (Hkv*D, C)
      CHECK(at::equal(hf, ours.reshape({32, 16}).t()));
  }
}

TEST_CASE("hf llama check: a sharded folder with either config.json layout") {
  spmd::test::TempDir dir;
  const spmd::Config c = llama_config(dir.path());
  write_sharded(dir, c.model);
  for (const Json& config : {config_v5(), config_published()}) {
    spmd::test::write_file(dir.file("config.json"), config.dump());
    CHECK_NOTHROW(spmd::check_hf_checkpoint(c));
  }
  spmd::Config shorter = c;  // block_size below max_position_embeddings
  shorter.model.block_size = 8;
  CHECK_NOTHROW(spmd::check_hf_checkpoint(shorter));
}

TEST_CASE("hf llama check: each model key that differs from the folder is named") {
  spmd::test::TempDir dir;
  const spmd::Config c = llama_config(dir.path());
  write_sharded(dir, c.model);
  spmd::test::write_file(dir.file("config.json"), config_published().dump());
  auto refusal = [&](void (*change)(spmd::ModelConfig&)) {
    spmd::Config changed = c;
    change(changed.model);
    return usage_error_of([&] { spmd::check_hf_checkpoint(changed); });
  };
  std::string msg = refusal([](spmd::ModelConfig& m) { m.rope_theta = 10000; });
  CHECK(msg.find(dir.file("config.json")) != std::string::npos);
  CHECK(msg.find("rope_theta = 500000.0 but model.rope_theta") != std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.rms_norm_eps = 1e-6; }).find("model.rms_norm_eps") != std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.n_kv_head = 4; }).find("num_key_value_heads = 2 but model.n_kv_head = 4") !=
        std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.intermediate_size = 64; }).find("model.intermediate_size") !=
        std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.n_layer = 3; }).find("model.n_layer") != std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.n_embd = 64; }).find("model.n_embd") != std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.vocab_size = 70; }).find("model.vocab_size") != std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.tie_embeddings = true; }).find("model.tie_embeddings") !=
        std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.rope_scaling.factor = 0; }).find("model.rope_scaling") !=
        std::string::npos);
  CHECK(refusal([](spmd::ModelConfig& m) { m.rope_scaling.factor = 16; }).find("model.rope_scaling.factor") !=
        std::string::npos);
}

TEST_CASE("hf llama check: tensors that do not fit are named with the model key to check") {
  spmd::test::TempDir dir;
  spmd::Config c = llama_config(dir.path());
  spmd::Config fewer_kv = c;
  fewer_kv.model.n_kv_head = 1;
  write_sharded(dir, fewer_kv.model);  // tensors of 1 key/value head, config.json saying 2
  Json config = config_v5();
  spmd::test::write_file(dir.file("config.json"), config.dump());
  std::string msg = usage_error_of([&] { spmd::check_hf_checkpoint(c); });
  CHECK(msg.find("has shape [8, 32] but the model config needs [16, 32] (check model.n_kv_head)") != std::string::npos);

  spmd::test::TempDir tied_dir;  // a tied model's folder has no lm_head.weight
  spmd::Config tied = llama_config(tied_dir.path());
  tied.model.tie_embeddings = true;
  write_sharded(tied_dir, tied.model);
  config = config_v5();
  config["tie_word_embeddings"] = true;
  spmd::test::write_file(tied_dir.file("config.json"), config.dump());
  CHECK_NOTHROW(spmd::check_hf_checkpoint(tied));
  config["tie_word_embeddings"] = false;
  spmd::test::write_file(tied_dir.file("config.json"), config.dump());
  spmd::Config untied = tied;
  untied.model.tie_embeddings = false;
  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(untied); }).find("no tensor 'lm_head.weight'") !=
        std::string::npos);

  std::filesystem::remove(tied_dir.file("config.json"));
  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(tied); }).find("config.json") != std::string::npos);
}
