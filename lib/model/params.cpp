// The family-neutral entry points to the parameter tables.
#include "model/params.h"

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
