// The parameter name and shape mapping between our GPT-2 and Hugging Face's.
#include "ckpt/hf_gpt2_layout.h"

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

std::string hf_gpt2_name(const std::string& param) {
  if (param == "wte" || param == "wpe") return "transformer." + param + ".weight";
  return "transformer." + param;
}

std::vector<int64_t> unpadded_shape(const ParamInfo& info) {
  std::vector<int64_t> shape = info.shape;
  if (info.padded_dim >= 0) shape[static_cast<size_t>(info.padded_dim)] = info.unpadded_size;
  return shape;
}

std::vector<int64_t> hf_gpt2_shape(const ParamInfo& info) {
  const std::vector<int64_t> shape = unpadded_shape(info);
  if (info.input_dims > 0) {  // a dense weight: Conv1D's (in, out)
    const auto split = shape.begin() + info.input_dims;
    return {product(shape.begin(), split), product(split, shape.end())};
  }
  if (ends_with(info.name, ".bias")) return {product(shape.begin(), shape.end())};
  return shape;
}

}  // namespace spmd
