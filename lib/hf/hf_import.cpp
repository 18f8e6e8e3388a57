// Hugging Face GPT-2 checkpoint -> this rank's shards.
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

#include "hf/name_map.h"
#include "ckpt/safetensors.h"
#include "util/error.h"
#include "util/json_file.h"

namespace fs = std::filesystem;

namespace spmd {

namespace {
const HfNameMap& kMap = gpt2_hf_map();

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Buffers some checkpoints save beside the parameters (GPT-2's causal masks).
bool is_buffer(const std::string& name) {
  for (const auto& suffix : kMap.buffer_suffixes)
    if (ends_with(name, suffix)) return true;
  return false;
}

// The model.* key a dim of a parameter's HF shape follows (for messages).
std::string shape_key(const ParamInfo& info, size_t dim) {
  if (info.name == "wte" && dim == 0) return "model.vocab_size";
  if (info.name == "wpe" && dim == 0) return "model.block_size";
  return "model.n_embd";
}

// The name a parameter has in the file: with the `transformer.` prefix or without it.
std::string name_in_file(const SafetensorsFile& file, const ParamInfo& info, int64_t n_layer) {
  const std::string full = hf_name(kMap, info.name);
  if (file.entries().count(full)) return full;
  const std::string bare = full.substr(kMap.prefix.size());
  SPMD_CHECK(file.entries().count(bare),
             "train.init_from {}: no tensor '{}' (or '{}'), which the model config needs (model.n_layer = {}); is it "
             "a GPT-2 checkpoint of this depth?",
             file.path(), full, bare, n_layer);
  return bare;
}

// Every parameter's tensor name in the file, in table order, each checked for dtype and shape.
std::vector<std::string> match_tensors(const SafetensorsFile& file, const std::vector<ParamInfo>& table,
                                       int64_t n_layer) {
  std::vector<std::string> names;
  for (const auto& info : table) {
    const std::string name = name_in_file(file, info, n_layer);
    const SafetensorsEntry& e = file.entries().at(name);
    SPMD_CHECK(e.dtype == "F32", "train.init_from {}: tensor '{}' is {}; spmd-train loads float32 checkpoints only",
               file.path(), name, e.dtype);
    const std::vector<int64_t> want = hf_shape(info);
    if (e.shape != want) {
      size_t dim = 0;
      while (dim < want.size() && dim < e.shape.size() && e.shape[dim] == want[dim]) ++dim;
      throw UsageError(fmt::format("train.init_from {}: tensor '{}' has shape [{}] but the model config needs [{}] "
                                   "(check {})",
                                   file.path(), name, fmt::join(e.shape, ", "), fmt::join(want, ", "),
                                   shape_key(info, std::min(dim, want.size() - 1))));
    }
    names.push_back(name);
  }
  return names;
}

// Tensors the model has no place for (a deeper model, an untied head that differs, ...).
void check_no_extra_tensors(const SafetensorsFile& file, const std::vector<std::string>& matched,
                            const ModelConfig& model) {
  const std::set<std::string> used(matched.begin(), matched.end());
  for (const auto& [name, entry] : file.entries()) {
    if (used.count(name) || is_buffer(name) || name == kMap.tied_head) continue;
    throw UsageError(fmt::format("train.init_from {}: tensor '{}' (shape [{}]) has no place in the model config "
                                 "(model.n_layer = {}); is the checkpoint deeper, or not GPT-2?",
                                 file.path(), name, fmt::join(entry.shape, ", "), model.n_layer));
  }
}

// Our LM head is the embedding (tied); an lm_head.weight in the file must be a copy of it.
void check_tied_head(const SafetensorsFile& file, const std::string& wte_name) {
  auto it = file.entries().find(kMap.tied_head);
  if (it == file.entries().end()) return;
  const SafetensorsEntry& head = it->second;
  const SafetensorsEntry& wte = file.entries().at(wte_name);
  SPMD_CHECK(head.dtype == wte.dtype && head.shape == wte.shape &&
                 std::memcmp(file.bytes(kMap.tied_head), file.bytes(wte_name), wte.end - wte.begin) == 0,
             "train.init_from {}: lm_head.weight differs from {}; spmd-train ties the LM head to the token "
             "embedding and cannot load an untied head",
             file.path(), wte_name);
}

// config.json's sizes against model.*; also the fixed parts of our GPT-2 (tanh GELU, LayerNorm eps).
void check_config_json(const std::string& path, const ModelConfig& model) {
  nlohmann::json j = read_json_file(path, "train.init_from: config");
  for (const auto& size : kMap.config_sizes) {
    const std::string& key = size.hf_key;
    const std::string& ours = size.model_key;
    const int64_t value = model.*size.value;
    if (!j.contains(key)) continue;
    SPMD_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() == value,
               "train.init_from: {} has {} = {} but {} = {}; set {}: {} to load it", path, key, j[key].dump(), ours,
               value, ours, j[key].dump());
  }
  if (j.contains("activation_function")) {
    const auto act = j["activation_function"].dump();
    SPMD_CHECK(act == "\"gelu_new\"" || act == "\"gelu_pytorch_tanh\"",
               "train.init_from: {} has activation_function = {}; spmd-train's GPT-2 uses the tanh GELU (gelu_new)",
               path, act);
  }
  // Variants of the attention and head that our GPT-2 does not implement.
  for (const auto& [key, value] : std::vector<std::pair<const char*, bool>>{
           {"scale_attn_weights", true}, {"scale_attn_by_inverse_layer_idx", false}, {"tie_word_embeddings", true}})
    SPMD_CHECK(!j.contains(key) || j[key] == value, "train.init_from: {} has {} = {}; spmd-train's GPT-2 needs {}",
               path, key, j[key].dump(), value);
  if (j.contains("layer_norm_epsilon"))
    SPMD_CHECK(j["layer_norm_epsilon"].is_number() && j["layer_norm_epsilon"].get<double>() == 1e-5,
               "train.init_from: {} has layer_norm_epsilon = {}; spmd-train's GPT-2 uses 1e-05", path,
               j["layer_norm_epsilon"].dump());
}

// Copies the part of the HF tensor inside this rank's shard of `p` into `local`; padding rows,
// which no file holds, stay zero.
void copy_shard(const at::Tensor& hf, const ParamLayout& p, int64_t rank, at::Tensor& local) {
  at::Tensor src = hf.view(unpadded_shape(p.info));  // same bytes, our dims
  at::Tensor dst = local;
  const auto offset = p.sharding.shard_offset(rank);
  local.zero_();
  for (int64_t d = 0; d < src.dim(); ++d) {
    const int64_t begin = offset[static_cast<size_t>(d)];
    const int64_t end = std::min(begin + local.size(d), src.size(d));
    if (begin >= end) return;  // a shard of padding only
    src = src.narrow(d, begin, end - begin);
    dst = dst.narrow(d, 0, end - begin);
  }
  dst.copy_(src);
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
  SPMD_CHECK(fs::exists(paths.safetensors, ec),
             "train.init_from: directory {} has no model.safetensors (sharded or .bin checkpoints are not supported)",
             init_from);
  if (fs::exists(init_from + "/config.json", ec)) paths.config_json = init_from + "/config.json";
  return paths;
}

void check_hf_checkpoint(const Config& config) {
  const std::string& init_from = config.train.init_from;
  if (init_from.empty()) return;
  SPMD_CHECK(config.model.bias, "train.init_from {}: GPT-2 has biases; set model.bias: true", init_from);
  const HfCheckpointPaths paths = resolve_hf_checkpoint(init_from);
  if (!paths.config_json.empty()) check_config_json(paths.config_json, config.model);
  const SafetensorsFile file(paths.safetensors);
  const std::vector<ParamInfo> table = param_table(config.model, config.model.vocab_size);
  const std::vector<std::string> names = match_tensors(file, table, config.model.n_layer);
  check_no_extra_tensors(file, names, config.model);
  check_tied_head(file, names.front());  // the table starts with wte
}

int load_hf_checkpoint(ShardedModel& model, const std::string& init_from) {
  const auto& layout = model.layout();
  const int64_t rank = model.comm().rank();
  int loaded = 0;
  std::string error;
  try {
    const SafetensorsFile file(resolve_hf_checkpoint(init_from).safetensors);
    std::vector<ParamInfo> table;
    for (const auto& p : layout.params) table.push_back(p.info);
    // The header only: cheap enough to check again on every rank.
    const std::vector<std::string> names = match_tensors(file, table, layout.model.n_layer);
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < layout.params.size(); ++i) {
      if (!model.holds(i)) continue;  // another pipeline stage's
      copy_shard(file.tensor(names[i]), layout.params[i], rank, model.params()[i]);
      ++loaded;
    }
  } catch (const UsageError& e) {
    error = e.what();
  }
  agree_on_errors(model.comm(), error);
  return loaded;
}

}  // namespace spmd
