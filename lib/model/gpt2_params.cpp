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

int64_t gpt2_num_params(const ModelConfig& config, bool include_position_embedding) {
  int64_t n = 0;
  for (const auto& p : gpt2_param_table(config, config.vocab_size)) {
    if (!include_position_embedding && p.name == "wpe") continue;
    int64_t numel = 1;
    for (int64_t s : p.shape) numel *= s;
    n += numel;
  }
  return n;
}

}  // namespace spmd
