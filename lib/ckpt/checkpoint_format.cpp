// Names of the checkpoint format's files, and finding the newest complete step.
#include "ckpt/checkpoint_format.h"

#include <filesystem>

#include <fmt/format.h>

#include "muon/muon_matrices.h"

namespace fs = std::filesystem;

namespace spmd {

std::vector<std::string> checkpoint_array_kinds(const TrainConfig& train, const ParamInfo& param) {
  if (takes_muon(train, param)) return {"param", "momentum"};
  return {"param", "exp_avg", "exp_avg_sq"};
}

std::string checkpoint_step_dir_name(int64_t step) { return fmt::format("step_{:08d}", step); }
std::string checkpoint_rank_file_name(int rank) { return fmt::format("rank_{:05d}.safetensors", rank); }
std::string checkpoint_manifest_name(int64_t rank) { return fmt::format("manifest_{:05d}.json", rank); }

nlohmann::json checkpoint_model_json(const ModelConfig& m) {
  nlohmann::json j{{"arch", name_of(m.arch)}, {"vocab_size", m.vocab_size}, {"block_size", m.block_size},
                   {"n_layer", m.n_layer},      {"n_head", m.n_head},         {"n_embd", m.n_embd},
                   {"bias", m.bias}};
  // Another family than GPT-2 adds the keys that shape its tensors.
  if (m.arch != ModelArch::kGpt2) {
    j["n_kv_head"] = m.kv_heads();
    j["intermediate_size"] = m.mlp_size();
    j["tie_embeddings"] = m.tie_embeddings;
  }
  return j;
}

std::optional<std::string> find_latest_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return std::nullopt;
  std::string best;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string n = entry.path().filename().string();
    if (n.rfind("step_", 0) != 0 || n.find(".tmp") != std::string::npos) continue;
    if (!fs::exists(entry.path() / "index.json")) continue;
    if (n > best) best = n;
  }
  if (best.empty()) return std::nullopt;
  return dir + "/" + best;
}

}  // namespace spmd
