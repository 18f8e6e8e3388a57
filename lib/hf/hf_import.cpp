// Hugging Face GPT-2 or Llama-family checkpoint -> this rank's shards.
#include "hf/hf_import.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "hf/hf_config.h"
#include "hf/hf_experts.h"
#include "hf/hf_weights.h"
#include "hf/name_map.h"
#include "ckpt/safetensors.h"
#include "util/error.h"
#include "util/json_file.h"

namespace fs = std::filesystem;

namespace spmd {

namespace {

// Buffers some checkpoints save beside the parameters (GPT-2's causal masks, Llama's inv_freq).
bool is_buffer(const HfNameMap& map, const std::string& name) {
  for (const auto& suffix : map.buffer_suffixes)
    if (name.ends_with(suffix)) return true;
  return false;
}

// The model.* key a dim of a parameter's HF shape follows (for messages).
std::string shape_key(const HfNameMap& map, const ParamInfo& info, size_t dim) {
  if ((info.name == "wte" || info.name == "lm_head") && dim == 0) return "model.vocab_size";
  if (info.name == "wpe" && dim == 0) return "model.block_size";
  if (map.dense_out_in && info.input_dims > 0) {  // (out, in)
    if (info.name.ends_with(".attn.k.weight") || info.name.ends_with(".attn.v.weight"))
      return dim == 0 ? "model.n_kv_head" : "model.n_embd";
    if (info.name.ends_with(".mlp.gate.weight") || info.name.ends_with(".mlp.up.weight"))
      return dim == 0 ? "model.intermediate_size" : "model.n_embd";
    if (info.name.ends_with(".mlp.down.weight")) return dim == 0 ? "model.n_embd" : "model.intermediate_size";
    if (info.name.ends_with(".moe.router.weight")) return dim == 0 ? "model.moe.num_experts" : "model.n_embd";
    if (info.name.find(".moe.shared.") != std::string::npos)
      return (dim == 0) == info.name.ends_with(".down.weight") ? "model.n_embd"
                                                               : "model.moe.shared_expert_intermediate_size";
  }
  if (info.name.ends_with("_norm.weight") && info.name.find(".attn.") != std::string::npos)
    return "model.head_dim";
  return "model.n_embd";
}

// The name a parameter has in the file: with the family's prefix (`transformer.`, `model.`) or
// without it, or another spelling transformers reads (hf_name_spellings).
std::string name_in_file(const HfNameMap& map, const HfWeights& file, const ParamInfo& info, int64_t n_layer) {
  const std::string full = hf_name(map, info.name);
  const std::vector<std::string> spellings = hf_name_spellings(map, full);
  for (const auto& name : spellings)
    if (file.has(name)) return name;
  throw UsageError(fmt::format("train.init_from {}: no tensor '{}'{}, which the model config needs (model.n_layer = "
                               "{}{}); is it a {} checkpoint of this shape?",
                               file.path(), full,
                               spellings.size() > 1 ? fmt::format(" (or '{}')", fmt::join(spellings.begin() + 1,
                                                                                         spellings.end(), "', '"))
                                                    : "",
                               n_layer, info.name == "lm_head" ? ", model.tie_embeddings = false" : "", map.family));
}

// Where one parameter is in the file: one tensor, or the routed experts' (hf_experts.h).
struct HfParamSource {
  std::string name;          // the one tensor
  bool experts = false;
  HfExpertSource expert;     // experts: their tensors
  std::vector<std::string> tensors() const { return experts ? expert.names : std::vector<std::string>{name}; }
};

HfParamSource match_one_tensor(const HfNameMap& map, const HfWeights& file, const ParamInfo& info, int64_t n_layer) {
  const std::string name = name_in_file(map, file, info, n_layer);
  const SafetensorsEntry& e = file.entry(name);
  SPMD_CHECK(e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16",
             "train.init_from {}: tensor '{}' is {}; spmd-train loads float32, bfloat16 and float16 weights",
             file.path(), name, e.dtype);
  const std::vector<int64_t> want = hf_shape(info, map);
  if (e.shape != want) {
    size_t dim = 0;
    while (dim < want.size() && dim < e.shape.size() && e.shape[dim] == want[dim]) ++dim;
    throw UsageError(fmt::format("train.init_from {}: tensor '{}' has shape [{}] but the model config needs [{}] "
                                 "(check {})",
                                 file.path(), name, fmt::join(e.shape, ", "), fmt::join(want, ", "),
                                 shape_key(map, info, std::min(dim, want.size() - 1))));
  }
  return {name, false, {}};
}

// Every parameter's place in the file, in table order, each checked for dtype and shape.
std::vector<HfParamSource> match_tensors(const HfNameMap& map, const HfWeights& file,
                                         const std::vector<ParamInfo>& table, int64_t n_layer) {
  std::vector<HfParamSource> sources;
  for (const auto& info : table) {
    if (is_expert_weights(info))
      sources.push_back({"", true, find_expert_source(map, file, info)});
    else
      sources.push_back(match_one_tensor(map, file, info, n_layer));
  }
  return sources;
}

// Tensors the model has no place for (a deeper model, an untied head, ...).
void check_no_extra_tensors(const HfNameMap& map, const HfWeights& file, const std::vector<HfParamSource>& matched,
                            const ModelConfig& model) {
  std::set<std::string> used;
  for (const auto& source : matched)
    for (const auto& name : source.tensors()) used.insert(name);
  for (const auto& [name, shard] : file.names()) {
    if (used.count(name) || is_buffer(map, name) || (model.tie_embeddings && name == map.tied_head)) continue;
    throw UsageError(fmt::format("train.init_from {}: tensor '{}' (shape [{}]) has no place in the model config "
                                 "(model.n_layer = {}); is the checkpoint deeper, or not {}?",
                                 file.path(), name, fmt::join(file.entry(name).shape, ", "), model.n_layer,
                                 map.family));
  }
}

// A tied LM head is the embedding; an lm_head.weight in the file must be a copy of it.
void check_tied_head(const HfNameMap& map, const HfWeights& file, const std::string& wte_name) {
  if (!file.has(map.tied_head)) return;
  const SafetensorsEntry& head = file.entry(map.tied_head);
  const SafetensorsEntry& wte = file.entry(wte_name);
  SPMD_CHECK(head.dtype == wte.dtype && head.shape == wte.shape &&
                 std::memcmp(file.bytes(map.tied_head), file.bytes(wte_name), wte.end - wte.begin) == 0,
             "train.init_from {}: {} differs from {}; the model ties the LM head to the token embedding "
             "(model.tie_embeddings){}",
             file.path(), map.tied_head, wte_name,
             map.dense_out_in ? "; set model.tie_embeddings: false to load an untied head" : "");
}

// Copies the part of `src` (our dims, float32; its dim 0 starts at the global row `src_row`) inside
// this rank's shard of `p` into `local`; padding rows, which no file holds, stay zero.
void copy_shard(at::Tensor src, int64_t src_row, const ParamLayout& p, int64_t rank, at::Tensor& local) {
  at::Tensor dst = local;
  const auto offset = p.sharding.shard_offset(rank);
  local.zero_();
  for (int64_t d = 0; d < src.dim(); ++d) {
    const int64_t begin = offset[static_cast<size_t>(d)] - (d == 0 ? src_row : 0);
    const int64_t end = std::min(begin + local.size(d), src.size(d));
    if (begin >= end) return;  // a shard of padding only
    src = src.narrow(d, begin, end - begin);
    dst = dst.narrow(d, 0, end - begin);
  }
  dst.copy_(src);
}

// This rank's shard of one parameter from the file: of the routed experts, only the experts the
// shard holds are read.
void load_param(const HfNameMap& map, const HfWeights& file, const HfParamSource& source, const ParamLayout& p,
                int64_t rank, at::Tensor& local) {
  if (!source.experts) return copy_shard(from_hf_layout(map, p.info, file.tensor(source.name)), 0, p, rank, local);
  const int64_t first = p.sharding.shard_offset(rank)[0];
  const int64_t count = std::min(local.size(0), p.info.shape[0] - first);
  if (count <= 0) return (void)local.zero_();
  copy_shard(read_experts(file, source.expert, first, count), first, p, rank, local);
}

// A rank may be the only one to fail (its slice of the file): all learn every rank's error (a
// fixed-size all-gather) and throw the first, so no rank goes on training alone.
void agree_on_errors(const Communicator& comm, const std::string& error) {
  constexpr int64_t kMessageBytes = 1024;
  at::Tensor mine = at::zeros({1, kMessageBytes}, at::kByte);
  std::memcpy(mine.data_ptr(), error.data(), std::min<size_t>(error.size(), kMessageBytes - 1));
  const at::Tensor all = comm.control().all_gather(mine, 0);  // (world, kMessageBytes)
  for (int64_t r = 0; r < all.size(0); ++r) {
    const char* text = reinterpret_cast<const char*>(all[r].data_ptr());
    if (text[0] != '\0') throw UsageError(std::string(text, strnlen(text, kMessageBytes)));
  }
}
}  // namespace

HfCheckpointPaths resolve_hf_checkpoint(const std::string& init_from) {
  std::error_code ec;
  SPMD_CHECK(fs::exists(init_from, ec), "train.init_from: {} does not exist", init_from);
  if (!fs::is_directory(init_from, ec)) return {init_from, ""};
  HfCheckpointPaths paths{init_from + "/model.safetensors", ""};
  if (!fs::exists(paths.safetensors, ec)) paths.safetensors = init_from + "/model.safetensors.index.json";
  SPMD_CHECK(fs::exists(paths.safetensors, ec),
             "train.init_from: directory {} has neither model.safetensors nor model.safetensors.index.json "
             "(.bin checkpoints are not supported)",
             init_from);
  if (fs::exists(init_from + "/config.json", ec)) paths.config_json = init_from + "/config.json";
  return paths;
}

void check_hf_checkpoint(const Config& config) {
  const std::string& init_from = config.train.init_from;
  if (init_from.empty()) return;
  const bool llama = config.model.arch == ModelArch::kLlama;
  if (!llama) SPMD_CHECK(config.model.bias, "train.init_from {}: GPT-2 has biases; set model.bias: true", init_from);
  const HfCheckpointPaths paths = resolve_hf_checkpoint(init_from);
  SPMD_CHECK(!llama || !paths.config_json.empty(),
             "train.init_from: {} is not a folder with config.json; a Llama checkpoint needs its config.json "
             "(rope_theta, rms_norm_eps and the rest are checked against model.*)",
             init_from);
  if (!paths.config_json.empty()) check_hf_config_json(paths.config_json, config.model);  // the family first
  const HfNameMap& map = hf_map(config.model);
  const HfWeights file(paths.safetensors);
  const std::vector<ParamInfo> table = param_table(config.model, config.model.vocab_size);
  const std::vector<HfParamSource> sources = match_tensors(map, file, table, config.model.n_layer);
  check_no_extra_tensors(map, file, sources, config.model);
  if (config.model.tie_embeddings) check_tied_head(map, file, sources.front().name);  // the table starts with wte
}

int load_hf_checkpoint(ShardedModel& model, const std::string& init_from) {
  const auto& layout = model.layout();
  const HfNameMap& map = hf_map(layout.model);
  const int64_t rank = model.comm().rank();
  int loaded = 0;
  std::string error;
  try {
    const HfWeights file(resolve_hf_checkpoint(init_from).safetensors);
    std::vector<ParamInfo> table;
    for (const auto& p : layout.params) table.push_back(p.info);
    // The header only: cheap enough to check again on every rank.
    const std::vector<HfParamSource> sources = match_tensors(map, file, table, layout.model.n_layer);
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < layout.params.size(); ++i) {
      if (!model.holds(i)) continue;  // another pipeline stage's
      load_param(map, file, sources[i], layout.params[i], rank, model.params()[i]);
      ++loaded;
    }
  } catch (const UsageError& e) {
    error = e.what();
  }
  agree_on_errors(model.comm(), error);
  return loaded;
}

}  // namespace spmd
