// The GPT-2 parameter table with logical axes.
#include "model/gpt2_params.h"

#include <cmath>

#include <fmt/format.h>

namespace spmd {

std::vector<ParamInfo> gpt2_param_table(const ModelConfig& c, int64_t padded_vocab) {
  const int64_t C = c.n_embd, H = c.n_head, D = c.n_embd / c.n_head, F = 4 * c.n_embd;
  // Residual projections are scaled by 1/sqrt(2 * n_layer) (GPT-2 paper, nanoGPT).
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  std::vector<ParamInfo> table;
  auto add = [&](std::string name, std::vector<int64_t> shape, std::vector<std::string> logical,
                 ParamInit init, double std = 0.02, int64_t input_dims = 0) {
    // Decay weight matrices and embeddings (2-D in nanoGPT's layout) but no bias or LayerNorm
    // scale, whatever its shape here (c_attn's bias is stored (3, heads, head_dim)).
    bool decay = init == ParamInit::kNormal;
    table.push_back({std::move(name), std::move(shape), std::move(logical), init, std, decay, input_dims});
  };
  auto layer_norm = [&](const std::string& prefix) {
    add(prefix + ".weight", {C}, {"embed"}, ParamInit::kOnes);
    table.back().per_position = true;
    if (c.bias) add(prefix + ".bias", {C}, {"embed"}, ParamInit::kZeros);
    if (c.bias) table.back().per_position = true;
  };

  add("wte", {padded_vocab, C}, {"vocab", "embed"}, ParamInit::kNormal);  // tied with the LM head
  table.back().padded_dim = 0;
  table.back().unpadded_size = c.vocab_size;
  table.back().before_stack = table.back().after_stack = true;
  add("wpe", {c.block_size, C}, {"", "embed"}, ParamInit::kNormal);
  table.back().before_stack = true;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const size_t first = table.size();
    const std::string h = fmt::format("h.{}", l);
    layer_norm(h + ".ln_1");
    add(h + ".attn.c_attn.weight", {C, 3, H, D}, {"embed", "", "heads", "kv"}, ParamInit::kNormal, 0.02, 1);
    if (c.bias) add(h + ".attn.c_attn.bias", {3, H, D}, {"", "heads", "kv"}, ParamInit::kZeros);
    add(h + ".attn.c_proj.weight", {H, D, C}, {"heads", "kv", "embed"}, ParamInit::kNormal, residual_std, 2);
    if (c.bias) add(h + ".attn.c_proj.bias", {C}, {"embed"}, ParamInit::kZeros);
    if (c.bias) table.back().per_position = true;
    layer_norm(h + ".ln_2");
    add(h + ".mlp.c_fc.weight", {C, F}, {"embed", "mlp"}, ParamInit::kNormal, 0.02, 1);
    if (c.bias) add(h + ".mlp.c_fc.bias", {F}, {"mlp"}, ParamInit::kZeros);
    add(h + ".mlp.c_proj.weight", {F, C}, {"mlp", "embed"}, ParamInit::kNormal, residual_std, 1);
    if (c.bias) add(h + ".mlp.c_proj.bias", {C}, {"embed"}, ParamInit::kZeros);
    if (c.bias) table.back().per_position = true;
    for (size_t i = first; i < table.size(); ++i) table[i].layer = l;
  }
  layer_norm("ln_f");
  for (auto& p : table)
    if (p.name.rfind("ln_f.", 0) == 0) p.after_stack = true;
  return table;
}

std::vector<SizeSource> gpt2_size_sources(const ModelConfig& c) {
  const int64_t H = c.n_head, C = c.n_embd;
  // n_embd must stay a multiple of n_head (config validation): other values are no way out.
  auto embd = [H](int64_t factor) {
    return [H, factor](int64_t v) { return v % H == 0 ? factor * v : int64_t{-1}; };
  };
  const std::string keep = fmt::format("a multiple of model.n_head = {}", H);
  return {
      {"heads", "model.n_head", "model.n_head", H, [](int64_t v) { return v; },
       fmt::format("model.n_embd = {} must stay a multiple of it", C)},
      {"embed", "model.n_embd", "model.n_embd", C, embd(1), keep},
      {"mlp", "model.n_embd", "4 x model.n_embd", C, embd(4), keep},
      {"kv", "model.n_embd", "model.n_embd / model.n_head", C,
       [H](int64_t v) { return v % H == 0 ? v / H : int64_t{-1}; }, keep},
      {"seq", "model.block_size", "model.block_size", c.block_size, [](int64_t v) { return v; }, ""},
      {"vocab", "model.vocab_size", "model.vocab_size", c.vocab_size, [](int64_t v) { return v; }, ""},
  };
}

}  // namespace spmd
