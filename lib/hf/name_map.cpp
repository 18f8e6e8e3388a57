// The name and shape mapping between our parameters and Hugging Face's, and GPT-2's map.
#include "hf/name_map.h"

#include <functional>
#include <numeric>

namespace spmd {

namespace {
int64_t product(std::vector<int64_t>::const_iterator begin, std::vector<int64_t>::const_iterator end) {
  return std::accumulate(begin, end, int64_t{1}, std::multiplies<>());
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

const HfNameMap& gpt2_hf_map() {
  static const HfNameMap map{
      "GPT-2",
      "transformer.",
      {{"wte", "wte.weight"}, {"wpe", "wpe.weight"}},
      // The causal-mask buffers older transformers versions saved with every block.
      {".attn.bias", ".attn.masked_bias"},
      "lm_head.weight",
      {{"n_embd", "model.n_embd", &ModelConfig::n_embd},
       {"n_layer", "model.n_layer", &ModelConfig::n_layer},
       {"n_head", "model.n_head", &ModelConfig::n_head},
       {"n_positions", "model.block_size", &ModelConfig::block_size},
       {"vocab_size", "model.vocab_size", &ModelConfig::vocab_size}}};
  return map;
}

std::string hf_name(const HfNameMap& map, const std::string& param) {
  for (const auto& [ours, theirs] : map.renamed)
    if (ours == param) return map.prefix + theirs;
  return map.prefix + param;
}

std::vector<int64_t> unpadded_shape(const ParamInfo& info) {
  std::vector<int64_t> shape = info.shape;
  if (info.padded_dim >= 0) shape[static_cast<size_t>(info.padded_dim)] = info.unpadded_size;
  return shape;
}

std::vector<int64_t> hf_shape(const ParamInfo& info) {
  const std::vector<int64_t> shape = unpadded_shape(info);
  if (info.input_dims > 0) {  // a dense weight: Conv1D's (in, out)
    const auto split = shape.begin() + info.input_dims;
    return {product(shape.begin(), split), product(split, shape.end())};
  }
  if (ends_with(info.name, ".bias")) return {product(shape.begin(), shape.end())};
  return shape;
}

}  // namespace spmd
