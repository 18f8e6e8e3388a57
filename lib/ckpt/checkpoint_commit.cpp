// The index of a checkpoint and its atomic commit.
#include "ckpt/checkpoint_commit.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "ckpt/checkpoint_format.h"
#include "data/dataset_tokenizer.h"
#include "util/durable_file.h"
#include "util/json_file.h"
#include "util/test_hooks.h"

namespace fs = std::filesystem;

namespace spmd {

namespace {

// The index's entry for every array: global shape, spec, and the block each replica group's
// writer wrote (from the ranks' manifests).
nlohmann::json index_arrays(const TrainConfig& train, const ModelLayout& layout,
                            const std::map<int64_t, nlohmann::json>& manifests) {
  nlohmann::json arrays = nlohmann::json::array();
  const auto writers = block_writers(layout);
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamLayout& p = layout.params[i];
    for (const std::string& kind : checkpoint_array_kinds(train, p.info)) {
      const std::string name = kind + "/" + p.info.name;
      nlohmann::json block_list = nlohmann::json::array();
      for (const int64_t holder : writers[i]) {
        const auto& m = manifests.at(holder).at(name);
        block_list.push_back({{"file", m["file"]},
                              {"tensor", name},
                              {"offset", p.sharding.shard_offset(holder)},
                              {"shape", p.sharding.shard_shape()},
                              {"byte_range", m["byte_range"]},
                              {"checksum", m["checksum"]}});
      }
      arrays.push_back({{"name", name},
                        {"shape", p.info.shape},
                        {"dtype", "F32"},
                        {"logical", p.info.logical},
                        {"spec", spec_to_json(p.sharding.spec())},
                        {"blocks", block_list}});
    }
  }
  return arrays;
}

nlohmann::json index_of(const SaveJob& job, const Config& config, const ModelLayout& layout,
                        const std::map<int64_t, nlohmann::json>& manifests) {
  nlohmann::json rules = nlohmann::json::array();
  for (const auto& r : layout.rules.rules()) rules.push_back({r.logical, r.mesh_axes});
  const nlohmann::json& small = job.small_state;
  return {{"format", "spmd-train-checkpoint"},
          {"version", kCheckpointFormatVersion},
          {"step", small.at("step")},
          {"mesh", {{"shape", layout.mesh.shape()}, {"axes", layout.mesh.axes()}}},
          {"sharding_rules", rules},
          {"model", checkpoint_model_json(config.model)},
          {"padded_vocab", layout.padded_vocab},
          {"data_iterator", small.at("data_iterator")},
          {"rng", {{"kind", "counter-based splitmix64"}, {"seed", config.train.seed}}},
          {"optimizer", {{"kind", name_of(config.train.optimizer)}, {"steps_taken", small.at("steps_taken")}}},
          {"config", config.resolved_yaml},
          {"arrays", index_arrays(config.train, layout, manifests)}};
}

// Keeps the newest `keep` complete checkpoints in `dir`.
void prune_checkpoints(const std::string& dir, int64_t keep) {
  std::vector<std::string> complete;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string n = entry.path().filename().string();
    if (n.rfind("step_", 0) == 0 && n.find(".tmp") == std::string::npos && fs::exists(entry.path() / "index.json"))
      complete.push_back(n);
  }
  std::sort(complete.begin(), complete.end());
  for (size_t k = 0; k + static_cast<size_t>(keep) < complete.size(); ++k) fs::remove_all(dir + "/" + complete[k]);
}
}  // namespace

void commit_save(const SaveJob& job, const Config& config, const ModelLayout& layout) {
  std::map<int64_t, nlohmann::json> manifests;
  for (int64_t r = 0; r < layout.mesh.size(); ++r)
    manifests[r] = read_json_file(job.tmp_dir + "/" + checkpoint_manifest_name(r), "checkpoint manifest");
  const nlohmann::json index = index_of(job, config, layout, manifests);
  for (int64_t r = 0; r < layout.mesh.size(); ++r) fs::remove(job.tmp_dir + "/" + checkpoint_manifest_name(r));
  // The tokenizer goes along, so `spmd-train sample` decodes without the dataset.
  const std::string meta = dataset_meta_path(tokenizer_data_path(config.data));
  if (!meta.empty()) copy_tokenizer(meta, job.tmp_dir + "/tokenizer");
  write_file_durably(job.tmp_dir + "/index.json", index.dump(1));
  fsync_directory(job.tmp_dir);
  if (test_hooks().crash_in_save_at_step == job.step) _exit(1);  // tests: die as a crash would, before the commit
  fs::rename(job.tmp_dir, job.final_dir);
  fsync_directory(job.dir);
  prune_checkpoints(job.dir, config.checkpoint.keep);
}

}  // namespace spmd
