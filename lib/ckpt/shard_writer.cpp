// What each rank writes of one checkpoint save: its blocks' shard file and manifest.
#include "ckpt/shard_writer.h"

#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "ckpt/checkpoint_format.h"
#include "util/direct_file.h"
#include "util/durable_file.h"
#include "util/error.h"
#include "util/test_hooks.h"

namespace fs = std::filesystem;

namespace spmd {

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
    for (const std::string& kind : checkpoint_array_kinds(s.config.train, layout.params[i].info))
      job.blocks.push_back({kind + "/" + layout.params[i].info.name,
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
  const TestHooks& hooks = test_hooks();  // tests: a slow disk, and a failed write on one rank only
  if (hooks.slow_save_write_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hooks.slow_save_write_ms));
  if (hooks.fail_save_write_at_step == job.step && hooks.fail_save_write_rank == job.rank)
    throw RuntimeError(fmt::format("cannot write {}/{}: injected write failure (SPMD_TEST_HOOKS)", job.tmp_dir,
                                   checkpoint_rank_file_name(job.rank)));
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
      // tests: die as a crash would, with the file half written
      if (i == 0 && hooks.sigkill_in_save_at_step == job.step && hooks.sigkill_in_save_rank == job.rank) raise(SIGKILL);
    }
    out.finish();
  }
  write_file_durably(job.tmp_dir + "/" + checkpoint_manifest_name(job.rank), manifest.dump());
  fsync_directory(job.tmp_dir);
}

}  // namespace spmd
