// What one checkpoint save writes: the ranks' shard files and rank 0's index and commit.
#include "ckpt/checkpoint_save.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "ckpt/checkpoint_format.h"
#include "data/dataset_tokenizer.h"
#include "inspect/report.h"
#include "util/direct_file.h"
#include "util/durable_file.h"
#include "util/error.h"
#include "util/json_file.h"
#include "util/test_hooks.h"

namespace fs = std::filesystem;

namespace spmd {

namespace {

// Which member of each replica group writes the group's block (parameter and both AdamW moments),
// by parameter, then by group in replica_groups() order: the member with the fewest bytes to
// write so far (ties: the first), so the replicas share the writing and the staging copy (data
// parallelism over 2: each rank about half) instead of one holder doing it all. A function of the
// layout alone: every rank computes the same.
std::vector<std::vector<int64_t>> block_writers(const ModelLayout& layout) {
  std::map<int64_t, int64_t> bytes_of;  // rank -> bytes assigned
  std::vector<std::vector<int64_t>> writers;
  for (const auto& p : layout.params) {
    writers.emplace_back();
    const int64_t bytes = 3 * 4 * p.sharding.shard_numel();
    for (const auto& group : p.sharding.replica_groups()) {
      int64_t writer = group.front();
      for (int64_t r : group)
        if (bytes_of[r] < bytes_of[writer]) writer = r;
      bytes_of[writer] += bytes;
      writers.back().push_back(writer);
    }
  }
  return writers;
}

// The index's entry for every array: global shape, spec, and the block each replica group's
// writer wrote (from the ranks' manifests).
nlohmann::json index_arrays(const ModelLayout& layout, const std::map<int64_t, nlohmann::json>& manifests) {
  nlohmann::json arrays = nlohmann::json::array();
  const auto writers = block_writers(layout);
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamLayout& p = layout.params[i];
    for (const char* kind : kCheckpointArrayKinds) {
      const std::string name = std::string(kind) + "/" + p.info.name;
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
          {"optimizer", {{"kind", "adamw"}, {"steps_taken", small.at("steps_taken")}}},
          {"config", config.resolved_yaml},
          {"arrays", index_arrays(layout, manifests)}};
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

SaveJob describe_save(CheckpointState& s) {
  SaveJob job;
  job.step = s.step;
  job.dir = s.config.checkpoint.dir;
  job.final_dir = job.dir + "/" + checkpoint_step_dir_name(s.step);
  job.tmp_dir = job.final_dir + ".tmp";
  job.rank = s.comm.rank();
  const auto& layout = s.model.layout();
  const auto writers = block_writers(layout);
  for (size_t i = 0; i < layout.params.size(); ++i) {
    if (std::find(writers[i].begin(), writers[i].end(), job.rank) == writers[i].end()) continue;
    for (const char* kind : kCheckpointArrayKinds)
      job.blocks.push_back({std::string(kind) + "/" + layout.params[i].info.name,
                            checkpoint_local_array(s, kind, i).detach()});
  }
  nlohmann::json loader_state;
  to_json(loader_state, s.loader.state());
  job.small_state = {{"step", s.step}, {"data_iterator", loader_state}, {"steps_taken", s.optimizer.steps_taken()}};
  return job;
}

bool prepare_save_dir(CheckpointState& s, const SaveJob& job) {
  int64_t saved = 0;
  if (job.rank == 0) {
    saved = fs::exists(job.final_dir + "/index.json") ? 1 : 0;
    if (!saved) {
      std::error_code ec;
      fs::remove_all(job.tmp_dir, ec);  // a stale one from a crashed or abandoned save
      fs::create_directories(job.tmp_dir, ec);
      if (ec) throw RuntimeError(fmt::format("cannot create checkpoint directory {}: {}", job.tmp_dir, ec.message()));
    }
  }
  at::Tensor t = at::full({1}, saved, at::kLong);
  s.comm.control().broadcast(t, 0);
  return t.item<int64_t>() == 0;
}

void write_rank_files(const SaveJob& job, const std::atomic<bool>& cancelled) {
  const std::string file = checkpoint_rank_file_name(job.rank);
  nlohmann::json manifest = nlohmann::json::object();
  if (!job.blocks.empty()) {  // a rank holding only replicas of others' blocks writes no file
    const SafetensorsLayout layout = safetensors_layout(job.blocks, {{"format", "pt"}, {"producer", "spmd-train"}});
    DirectFile out(job.tmp_dir + "/" + file);  // past the page cache: the copy would cost training CPU
    out.append(layout.header.data(), layout.header.size());
    for (size_t i = 0; i < job.blocks.size(); ++i) {
      if (cancelled) throw RuntimeError("abandoned");
      const at::Tensor& t = job.blocks[i].tensor;
      const size_t bytes = static_cast<size_t>(t.numel()) * 4;
      out.append(t.data_ptr(), bytes);
      manifest[job.blocks[i].name] = {{"file", file},
                                      {"byte_range", {layout.ranges[i].first, layout.ranges[i].second}},
                                      {"checksum", block_checksum(t.data_ptr(), bytes)}};
      const TestHooks& hooks = test_hooks();  // tests: die as a crash would, with the file half written
      if (i == 0 && hooks.sigkill_in_save_at_step == job.step && hooks.sigkill_in_save_rank == job.rank) raise(SIGKILL);
    }
    out.finish();
  }
  write_file_durably(job.tmp_dir + "/" + checkpoint_manifest_name(job.rank), manifest.dump());
  fsync_directory(job.tmp_dir);
}

void commit_save(const SaveJob& job, const Config& config, const ModelLayout& layout) {
  std::map<int64_t, nlohmann::json> manifests;
  for (int64_t r = 0; r < layout.mesh.size(); ++r)
    manifests[r] = read_json_file(job.tmp_dir + "/" + checkpoint_manifest_name(r), "checkpoint manifest");
  const nlohmann::json index = index_of(job, config, layout, manifests);
  for (int64_t r = 0; r < layout.mesh.size(); ++r) fs::remove(job.tmp_dir + "/" + checkpoint_manifest_name(r));
  // The tokenizer goes along, so `spmd-train sample` decodes without the dataset.
  const std::string meta = dataset_meta_path(config.data.train);
  if (!meta.empty()) copy_tokenizer(meta, job.tmp_dir + "/tokenizer");
  write_file_durably(job.tmp_dir + "/index.json", index.dump(1));
  fsync_directory(job.tmp_dir);
  if (test_hooks().crash_in_save_at_step == job.step) _exit(1);  // tests: die as a crash would, before the commit
  fs::rename(job.tmp_dir, job.final_dir);
  fsync_directory(job.dir);
  prune_checkpoints(job.dir, config.checkpoint.keep);
}

}  // namespace spmd
