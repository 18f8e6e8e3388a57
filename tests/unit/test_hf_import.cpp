// Unit tests for the Hugging Face GPT-2 mapping and for check_hf_checkpoint (train.init_from):
// the layouts, and every refusal naming the file, the tensor, both shapes and the config key.
#include <string>
#include <vector>

#include "hf/name_map.h"
#include "hf/hf_import.h"
#include "ckpt/safetensors.h"

#include "doctest_check.h"

#include "test_support.h"
#include "usage_error.h"

using spmd::test::usage_error_of;

namespace {

spmd::Config tiny_config(const std::string& init_from) {
  spmd::Config c;
  c.model.vocab_size = 65;
  c.model.block_size = 16;
  c.model.n_layer = 2;
  c.model.n_head = 4;
  c.model.n_embd = 32;
  c.train.init_from = init_from;
  return c;
}

// A GPT-2 of `model`'s sizes in Hugging Face layout (random values); `prefix` "" or "transformer.".
std::vector<spmd::NamedTensor> hf_tensors(const spmd::ModelConfig& model, const std::string& prefix) {
  std::vector<spmd::NamedTensor> out;
  for (const auto& info : spmd::param_table(model, model.vocab_size)) {
    std::string name = spmd::hf_name(spmd::gpt2_hf_map(), info.name).substr(std::string("transformer.").size());
    out.push_back({prefix + name, at::randn(spmd::hf_shape(info))});
  }
  return out;
}

std::string write(const spmd::test::TempDir& dir, const std::vector<spmd::NamedTensor>& tensors) {
  const std::string path = dir.file("model.safetensors");
  spmd::write_safetensors(path, tensors);
  return path;
}

}  // namespace

TEST_CASE("hf import layout: Conv1D (in, out) shapes, attention dims folded, vocab padding dropped") {
  spmd::ModelConfig m = tiny_config("").model;
  for (const auto& info : spmd::param_table(m, 72)) {
    CAPTURE(info.name);
    const auto shape = spmd::hf_shape(info);
    if (info.name == "wte") CHECK(shape == std::vector<int64_t>{65, 32});
    if (info.name == "h.1.attn.c_attn.weight") CHECK(shape == std::vector<int64_t>{32, 96});
    if (info.name == "h.1.attn.c_attn.bias") CHECK(shape == std::vector<int64_t>{96});
    if (info.name == "h.1.attn.c_proj.weight") CHECK(shape == std::vector<int64_t>{32, 32});
    if (info.name == "h.1.mlp.c_proj.weight") CHECK(shape == std::vector<int64_t>{128, 32});
  }
  CHECK(spmd::hf_name(spmd::gpt2_hf_map(), "wpe") == "transformer.wpe.weight");
  CHECK(spmd::hf_name(spmd::gpt2_hf_map(), "ln_f.bias") == "transformer.ln_f.bias");
}

TEST_CASE("hf import check: accepts both name styles, mask buffers and a tied lm_head") {
  spmd::test::TempDir dir;
  spmd::Config c = tiny_config(dir.path());
  for (std::string prefix : {"", "transformer."}) {
    CAPTURE(prefix);
    auto tensors = hf_tensors(c.model, prefix);
    tensors.push_back({prefix + "h.0.attn.bias", at::ones({1, 1, 16, 16})});  // old transformers' mask buffer
    tensors.push_back({"lm_head.weight", tensors.front().tensor.clone()});
    write(dir, tensors);
    spmd::test::write_file(dir.file("config.json"),
                           R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 16,
                               "vocab_size": 65, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05})");
    CHECK_NOTHROW(spmd::check_hf_checkpoint(c));
    CHECK_NOTHROW(spmd::check_hf_checkpoint(tiny_config(dir.file("model.safetensors"))));
  }
}

TEST_CASE("hf import check: refusals name the file, the tensor, both shapes and the model key") {
  spmd::test::TempDir dir;
  spmd::Config c = tiny_config(dir.path());
  const std::string file = write(dir, hf_tensors(c.model, "transformer."));

  spmd::Config wider = c;
  wider.model.n_embd = 48;
  std::string msg = usage_error_of([&] { spmd::check_hf_checkpoint(wider); });
  CHECK(msg.find(file) != std::string::npos);
  CHECK(msg.find("'transformer.wte.weight' has shape [65, 32] but the model config needs [65, 48]") != std::string::npos);
  CHECK(msg.find("model.n_embd") != std::string::npos);

  spmd::Config vocab = c;
  vocab.model.vocab_size = 70;
  msg = usage_error_of([&] { spmd::check_hf_checkpoint(vocab); });
  CHECK(msg.find("[65, 32] but the model config needs [70, 32] (check model.vocab_size)") != std::string::npos);

  spmd::Config deeper = c;
  deeper.model.n_layer = 3;
  msg = usage_error_of([&] { spmd::check_hf_checkpoint(deeper); });
  CHECK(msg.find("no tensor 'transformer.h.2.ln_1.weight'") != std::string::npos);
  CHECK(msg.find("model.n_layer = 3") != std::string::npos);

  spmd::Config shallower = c;
  shallower.model.n_layer = 1;
  msg = usage_error_of([&] { spmd::check_hf_checkpoint(shallower); });
  CHECK(msg.find("tensor 'transformer.h.1.") != std::string::npos);
  CHECK(msg.find("model.n_layer = 1") != std::string::npos);

  spmd::Config no_bias = c;
  no_bias.model.bias = false;
  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(no_bias); }).find("model.bias: true") != std::string::npos);

  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(tiny_config(dir.file("nope"))); }).find("does not exist") !=
        std::string::npos);
}

TEST_CASE("hf import check: an untied head and a disagreeing config.json are refused") {
  spmd::test::TempDir dir;
  spmd::Config c = tiny_config(dir.path());
  auto tensors = hf_tensors(c.model, "transformer.");
  tensors.push_back({"lm_head.weight", tensors.front().tensor + 1});
  write(dir, tensors);
  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(c); }).find("lm_head.weight differs from transformer.wte.weight") !=
        std::string::npos);

  tensors.pop_back();
  write(dir, tensors);
  spmd::test::write_file(dir.file("config.json"), R"({"n_embd": 32, "n_layer": 2, "n_head": 8, "n_positions": 16})");
  std::string msg = usage_error_of([&] { spmd::check_hf_checkpoint(c); });
  CHECK(msg.find(dir.file("config.json")) != std::string::npos);
  CHECK(msg.find("n_head = 8 but model.n_head = 4") != std::string::npos);
  spmd::test::write_file(dir.file("config.json"), R"({"activation_function": "relu"})");
  CHECK(usage_error_of([&] { spmd::check_hf_checkpoint(c); }).find("activation_function") != std::string::npos);
}
