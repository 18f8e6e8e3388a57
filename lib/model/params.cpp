// The family-neutral entry points to the parameter tables.
#include "model/params.h"

#include <algorithm>

#include "model/gpt2_params.h"
#include "model/llama_params.h"

namespace spmd {

std::vector<ParamInfo> param_table(const ModelConfig& config, int64_t padded_vocab) {
  switch (config.arch) {
    case ModelArch::kGpt2: return gpt2_param_table(config, padded_vocab);
    case ModelArch::kLlama: return llama_param_table(config, padded_vocab);
  }
  return {};
}

std::vector<SizeSource> size_sources(const ModelConfig& config) {
  switch (config.arch) {
    case ModelArch::kGpt2: return gpt2_size_sources(config);
    case ModelArch::kLlama: return llama_size_sources(config);
  }
  return {};
}

std::vector<const ParamInfo*> BlockWeights::all() const {
  std::vector<const ParamInfo*> out;
  for (const auto* group : {&attention_in, &attention_out, &mlp_in, &mlp_out}) out.insert(out.end(), group->begin(), group->end());
  return out;
}

BlockWeights block_weights(const std::vector<ParamInfo>& table) {
  BlockWeights w;
  for (const auto& p : table) {
    if (p.layer != 0 || p.input_dims == 0) continue;
    const auto& in = p.logical.front();
    const bool to_heads = std::find(p.logical.begin(), p.logical.end(), "heads") != p.logical.end();
    if (in == "embed" && to_heads) w.attention_in.push_back(&p);
    else if (in == "heads") w.attention_out.push_back(&p);
    else if (in == "embed" && p.logical.back() == "mlp") w.mlp_in.push_back(&p);
    else if (in == "mlp") w.mlp_out.push_back(&p);
  }
  return w;
}

ActivationTraits activation_traits(const ModelConfig& config) {
  switch (config.arch) {
    case ModelArch::kGpt2: return {0, 2, 1};
    case ModelArch::kLlama: return {1, 1, 3};
  }
  return {};
}

int64_t num_params(const ModelConfig& config, bool include_position_embedding) {
  int64_t n = 0;
  for (const auto& p : param_table(config, config.vocab_size)) {
    if (!include_position_embedding && p.name == "wpe") continue;
    int64_t numel = 1;
    for (int64_t s : p.shape) numel *= s;
    n += numel;
  }
  return n;
}

}  // namespace spmd
