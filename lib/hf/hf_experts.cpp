// The routed experts' weights in and out of Hugging Face files (see hf_experts.h).
#include "hf/hf_experts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"

namespace spmd {

namespace {

const std::string kExpertsInfix = ".moe.experts.";

// Which of gate, up, down (0, 1, 2) and the layer, from "h.{l}.moe.experts.{gate,up,down}".
struct ExpertWeightName {
  std::string layer;
  size_t which = 0;
};

ExpertWeightName parse_expert_weight(const std::string& name) {
  const size_t at = name.find(kExpertsInfix);
  const std::string kind = name.substr(at + kExpertsInfix.size());
  return {name.substr(2, at - 2), kind == "gate" ? size_t{0} : kind == "up" ? size_t{1} : size_t{2}};
}

std::string experts_module(const HfNameMap& map, const std::string& layer) {
  return map.prefix + map.block_prefix + layer + map.expert_module;
}

std::string per_expert_name(const HfNameMap& map, const ExpertWeightName& w, int64_t expert) {
  return experts_module(map, w.layer) + std::to_string(expert) + "." + map.expert_tensors.at(w.which);
}

// transformers 5's in-memory names: gate and up fused into one tensor.
std::string stacked_name(const HfNameMap& map, const ExpertWeightName& w) {
  return experts_module(map, w.layer) + (w.which == 2 ? "down_proj" : "gate_up_proj");
}

// The spelling of `hf` the file has, or "".
std::string expert_spelling_in(const HfNameMap& map, const HfWeights& file, const std::string& hf) {
  for (const auto& name : hf_name_spellings(map, hf))
    if (file.has(name)) return name;
  return "";
}

void check_expert_tensor(const HfWeights& file, const std::string& name, const std::vector<int64_t>& want) {
  const SafetensorsEntry& e = file.entry(name);
  SPMD_CHECK(e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16",
             "train.init_from {}: tensor '{}' is {}; spmd-train loads float32, bfloat16 and float16 weights",
             file.path(), name, e.dtype);
  SPMD_CHECK(e.shape == want,
             "train.init_from {}: tensor '{}' has shape [{}] but the model config needs [{}] (check "
             "model.moe.num_experts, model.moe.moe_intermediate_size and model.n_embd)",
             file.path(), name, fmt::join(e.shape, ", "), fmt::join(want, ", "));
}

}  // namespace

bool is_expert_weights(const ParamInfo& info) {
  const size_t at = info.name.find(kExpertsInfix);
  if (at == std::string::npos || info.name.rfind("h.", 0) != 0) return false;
  const std::string kind = info.name.substr(at + kExpertsInfix.size());
  return kind == "gate" || kind == "up" || kind == "down";
}

std::vector<NamedTensor> expert_hf_tensors(const HfNameMap& map, const ParamInfo& info, const at::Tensor& ours) {
  const ExpertWeightName w = parse_expert_weight(info.name);
  std::vector<NamedTensor> out;
  for (int64_t e = 0; e < ours.size(0); ++e)  // nn.Linear's (out, in): each expert's (in, out) transposed
    out.push_back({per_expert_name(map, w, e), ours[e].to(at::kFloat).t().contiguous()});
  return out;
}

HfExpertSource find_expert_source(const HfNameMap& map, const HfWeights& file, const ParamInfo& info) {
  const ExpertWeightName w = parse_expert_weight(info.name);
  const int64_t E = info.shape[0], in = info.shape[1], out = info.shape[2];
  HfExpertSource source;
  if (!expert_spelling_in(map, file, per_expert_name(map, w, 0)).empty()) {
    for (int64_t e = 0; e < E; ++e) {
      const std::string wanted = per_expert_name(map, w, e);
      const std::string name = expert_spelling_in(map, file, wanted);
      SPMD_CHECK(!name.empty(), "train.init_from {}: no tensor '{}', which the model config needs (model.moe."
                 "num_experts = {}); the file has expert 0's", file.path(), wanted, E);
      check_expert_tensor(file, name, {out, in});
      source.names.push_back(name);
    }
    return source;
  }
  const std::string stacked = expert_spelling_in(map, file, stacked_name(map, w));
  SPMD_CHECK(!stacked.empty(),
             "train.init_from {}: no tensor '{}' (nor the stacked '{}'), which the model config needs "
             "(model.moe.num_experts = {}, layer {} sparse: model.moe.mlp_only_layers, decoder_sparse_step); is it "
             "a {} checkpoint of this shape?",
             file.path(), per_expert_name(map, w, 0), stacked_name(map, w), E, w.layer, map.family);
  source = {{stacked}, true, 0, 0};
  if (w.which == 2) {
    check_expert_tensor(file, stacked, {E, out, in});  // (E, C, I)
  } else {
    check_expert_tensor(file, stacked, {E, 2 * out, in});  // (E, 2I, C): gate rows, then up rows
    source.first_row = w.which == 0 ? 0 : out;
    source.rows = out;
  }
  return source;
}

at::Tensor read_experts(const HfWeights& file, const HfExpertSource& source, int64_t first, int64_t count) {
  if (!source.stacked) {
    std::vector<at::Tensor> experts;
    for (int64_t e = first; e < first + count; ++e)
      experts.push_back(file.tensor(source.names[static_cast<size_t>(e)]).to(at::kFloat).t());
    return at::stack(experts);
  }
  at::Tensor t = file.tensor(source.names[0]).narrow(0, first, count);
  if (source.rows > 0) t = t.narrow(1, source.first_row, source.rows);
  return t.transpose(1, 2).to(at::kFloat).contiguous();
}

}  // namespace spmd
