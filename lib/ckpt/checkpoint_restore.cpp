// Restoring the sharded training state from a checkpoint directory.
#include "ckpt/checkpoint_restore.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>

#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_format.h"
#include "ckpt/safetensors.h"
#include "parallel/layout.h"
#include "util/checked_size.h"
#include "util/error.h"
#include "util/json_file.h"

namespace fs = std::filesystem;

namespace spmd {

std::string resolve_resume_path(const Config& config, const std::string& requested) {
  if (!requested.empty() && requested != "latest" && requested != "auto") {
    SPMD_CHECK(fs::exists(requested + "/index.json"), "--resume {}: not a complete checkpoint (no index.json there)",
               requested);
    return requested;
  }
  SPMD_CHECK(!config.checkpoint.dir.empty(), "--resume needs checkpoint.dir in the config, or a checkpoint path");
  auto latest = find_latest_checkpoint(config.checkpoint.dir);
  if (requested == "auto" && !latest) return "";
  SPMD_CHECK(latest.has_value(), "--resume: no complete checkpoint in {} (looked for step_*/index.json)",
             config.checkpoint.dir);
  return *latest;
}

namespace {
// A block's offset and shape (numbers from the index) lie inside the array's saved shape, with its
// rank: nothing past the array is read, and no sum of them wraps around.
void check_block_inside(const std::string& index_path, const std::string& name, const std::vector<int64_t>& offset,
                        const std::vector<int64_t>& shape, const std::vector<int64_t>& array_shape) {
  const auto fail = [&] {
    return UsageError(fmt::format("{}: a block of array '{}' at offset {} with shape {} does not lie inside its "
                                  "shape {} (corrupted index)", index_path, name, nlohmann::json(offset).dump(),
                                  nlohmann::json(shape).dump(), nlohmann::json(array_shape).dump()));
  };
  if (offset.size() != array_shape.size() || shape.size() != array_shape.size()) throw fail();
  for (size_t d = 0; d < array_shape.size(); ++d) {
    const auto end = checked_add(offset[d], shape[d]);
    if (offset[d] < 0 || shape[d] < 0 || !end || *end > array_shape[d]) throw fail();
  }
}

// The index of checkpoint `path`, checked to be ours and to describe the network `model`.
nlohmann::json read_checked_index(const std::string& path, const ModelConfig& model) {
  const std::string index_path = path + "/index.json";
  nlohmann::json index = read_json_file(index_path, "checkpoint index");
  try {
    SPMD_CHECK(index.at("format") == "spmd-train-checkpoint", "{}: not a spmd-train checkpoint index", index_path);
    SPMD_CHECK(index.at("version").get<int>() == kCheckpointFormatVersion, "{}: format version {} is not supported (expected {})",
               index_path, index.at("version").dump(), kCheckpointFormatVersion);
    // The model must be the same network; the mesh and rules may differ.
    nlohmann::json want = checkpoint_model_json(model);
    const nlohmann::json& saved = index.at("model");
    for (auto it = want.begin(); it != want.end(); ++it) {
      // Checkpoints written before model.arch existed are GPT-2's; a key another family lacks: null.
      const nlohmann::json got = saved.contains(it.key()) ? saved.at(it.key())
                                 : it.key() == "arch"     ? nlohmann::json("gpt2")
                                                          : nlohmann::json();
      SPMD_CHECK(got == it.value(), "{}: checkpoint has model.{} = {} but the config says {}; the model shape must match",
                 index_path, it.key(), got.dump(), it.value().dump());
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}: malformed checkpoint index: {}", index_path, e.what()));
  }
  return index;
}

// The local tensor an array (kind, parameter index) is read into.
using ArrayTarget = std::function<at::Tensor&(const std::string& kind, size_t param)>;
// The arrays read of each parameter (checkpoint_array_kinds, or the parameter alone).
using ArrayKinds = std::function<std::vector<std::string>(const ParamInfo& param)>;
std::vector<std::string> restore_parameter_array_only(const ParamInfo&) { return {"param"}; }

// Reads, for every parameter this rank holds and every kind, the parts of the saved blocks that
// overlap this rank's shard.
void read_arrays(const std::string& path, const nlohmann::json& index, const ModelLayout& layout, int rank,
                 const ArrayKinds& kinds_of, const ArrayTarget& local_array) {
  const std::string index_path = path + "/index.json";
  try {
    std::map<std::string, const nlohmann::json*> arrays;
    for (const auto& a : index.at("arrays")) arrays[a.at("name").get<std::string>()] = &a;
    std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
    auto open = [&](const std::string& name) -> const SafetensorsFile& {
      auto& f = files[name];
      if (!f) {
        const std::string file_path = path + "/" + name;
        SPMD_CHECK(fs::exists(file_path), "checkpoint file {} is missing", file_path);
        f = std::make_unique<SafetensorsFile>(file_path);
      }
      return *f;
    };

    at::NoGradGuard no_grad;
    for (size_t i = 0; i < layout.params.size(); ++i) {
      const auto& p = layout.params[i];
      if (!p.sharding.holds(rank)) continue;  // another pipeline stage reads it
      const auto target_offset = p.sharding.shard_offset(rank);
      const auto target_shape = p.sharding.shard_shape();
      for (const std::string& kind : kinds_of(p.info)) {
        const std::string name = kind + "/" + p.info.name;
        SPMD_CHECK(arrays.count(name), "{}: has no array '{}'", index_path, name);
        const auto& entry = *arrays[name];
        auto saved_shape = entry.at("shape").get<std::vector<int64_t>>();
        SPMD_CHECK(saved_shape.size() == p.info.shape.size(), "{}: array '{}' has shape {} but the model needs {}",
                   index_path, name, entry.at("shape").dump(), nlohmann::json(p.info.shape).dump());
        for (size_t d = 0; d < saved_shape.size(); ++d)
          SPMD_CHECK(saved_shape[d] == p.info.shape[d] || static_cast<int64_t>(d) == p.info.padded_dim,
                     "{}: array '{}' has shape {} but the model needs {}", index_path, name, entry.at("shape").dump(),
                     nlohmann::json(p.info.shape).dump());
        // Padding (the vocab's) may differ between meshes: padding rows are zero, so start from zeros and
        // copy every saved element that falls inside this rank's shard.
        at::Tensor& target = local_array(kind, i);
        target.zero_();
        for (const auto& block : entry.at("blocks")) {
          auto offset = block.at("offset").get<std::vector<int64_t>>();
          auto shape = block.at("shape").get<std::vector<int64_t>>();
          check_block_inside(index_path, name, offset, shape, saved_shape);
          std::vector<int64_t> lo(offset.size()), hi(offset.size());
          bool overlaps = true;
          for (size_t d = 0; d < offset.size(); ++d) {
            lo[d] = std::max(offset[d], target_offset[d]);
            hi[d] = std::min(offset[d] + shape[d], target_offset[d] + target_shape[d]);
            overlaps = overlaps && lo[d] < hi[d];
          }
          if (!overlaps) continue;
          const std::string file_name = block.at("file").get<std::string>();
          const SafetensorsFile& file = open(file_name);
          const std::string tensor = block.at("tensor").get<std::string>();
          SPMD_CHECK(file.entries().count(tensor), "checkpoint file {}/{} has no tensor '{}'", path, file_name, tensor);
          const auto& e = file.entries().at(tensor);
          auto range = block.at("byte_range").get<std::vector<uint64_t>>();
          SPMD_CHECK(range.size() == 2 && range[0] == file.data_start() + e.begin && range[1] == file.data_start() + e.end,
                     "checkpoint file {}/{}: tensor '{}' is not where the index says (corrupted)", path, file_name, tensor);
          SPMD_CHECK(checksum_matches(block.at("checksum").get<std::string>(), file.bytes(tensor), e.end - e.begin),
                     "checkpoint file {}/{}: checksum mismatch for '{}' (corrupted)", path, file_name, tensor);
          SPMD_CHECK(e.shape == shape, "checkpoint file {}/{}: tensor '{}' has shape {} but the index says {}", path,
                     file_name, tensor, nlohmann::json(e.shape).dump(), nlohmann::json(shape).dump());
          at::Tensor src = file.tensor(tensor), dst = target;
          for (size_t d = 0; d < offset.size(); ++d) {
            src = src.narrow(static_cast<int64_t>(d), lo[d] - offset[d], hi[d] - lo[d]);
            dst = dst.narrow(static_cast<int64_t>(d), lo[d] - target_offset[d], hi[d] - lo[d]);
          }
          dst.copy_(src);
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}: malformed checkpoint index: {}", index_path, e.what()));
  }
}

// The optimizer the checkpoint's state is for must be the config's: AdamW's moments are not a
// Muon momentum, nor the other way round.
void check_same_optimizer(const nlohmann::json& index, const std::string& path, const TrainConfig& train) {
  const std::string index_path = path + "/index.json";
  try {
    const std::string saved = index.at("optimizer").value("kind", "adamw");
    const std::string wanted = name_of(train.optimizer);
    SPMD_CHECK(saved == wanted,
               "{}: the checkpoint holds the state of train.optimizer {}, but the config says {}; resume with "
               "train.optimizer: {} (an optimizer cannot take over another's state)",
               index_path, saved, wanted, saved);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}: malformed checkpoint index: {}", index_path, e.what()));
  }
}

void restore_on_this_rank(CheckpointState& s, const std::string& path) {
  const nlohmann::json index = read_checked_index(path, s.config.model);
  check_same_optimizer(index, path, s.config.train);
  read_arrays(path, index, s.model.layout(), s.comm.rank(),
              [&](const ParamInfo& p) { return checkpoint_array_kinds(s.config.train, p); },
              [&](const std::string& kind, size_t i) -> at::Tensor& { return checkpoint_local_array(s, kind, i); });
  try {
    s.optimizer.set_steps_taken(index.at("optimizer").at("steps_taken").get<int64_t>());
    LoaderState loader_state;
    from_json(index.at("data_iterator"), loader_state);
    s.loader.restore(loader_state);
    s.step = index.at("step").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}/index.json: malformed checkpoint index: {}", path, e.what()));
  }
}

// A rank may be the only one to read a bad block: every rank learns every rank's error (a
// fixed-size all-gather) and all stop with the first one, so rank 0 can report it.
void on_every_rank_or_none(Communicator& comm, const std::function<void()>& restore) {
  constexpr int64_t kMessageBytes = 1024;
  std::string error;
  try {
    restore();
  } catch (const UsageError& e) {
    error = e.what();
  }
  at::Tensor mine = at::zeros({1, kMessageBytes}, at::kByte);
  std::memcpy(mine.data_ptr(), error.data(), std::min<size_t>(error.size(), kMessageBytes - 1));
  at::Tensor all = comm.control().all_gather(mine, 0);  // (world, kMessageBytes)
  for (int64_t r = 0; r < all.size(0); ++r) {
    const char* text = reinterpret_cast<const char*>(all[r].data_ptr());
    if (text[0] != '\0') throw UsageError(std::string(text, strnlen(text, kMessageBytes)));
  }
}
}  // namespace

void restore_checkpoint(CheckpointState& s, const std::string& path) {
  on_every_rank_or_none(s.comm, [&] { restore_on_this_rank(s, path); });
}

void restore_parameters(ShardedModel& model, const std::string& path) {
  on_every_rank_or_none(model.comm(), [&] {
    const nlohmann::json index = read_checked_index(path, model.layout().model);
    at::NoGradGuard no_grad;
    read_arrays(path, index, model.layout(), model.comm().rank(), restore_parameter_array_only,
                [&](const std::string&, size_t i) -> at::Tensor& { return model.params()[i]; });
  });
}

namespace {
// The config checkpoint `path` was written with, on one process: every mesh axis of size 1, no
// pipeline stages.
Config one_process_config(const std::string& path) {
  Config config = parse_config(checkpoint_config_yaml(path), path + "/index.json (its config)");
  for (auto& size : config.mesh.shape) size = 1;
  config.runtime.pipeline_layers.clear();
  config.runtime.virtual_stages = 1;
  if (config.runtime.pipeline_schedule == PipelineSchedule::kInterleaved)
    config.runtime.pipeline_schedule = PipelineSchedule::kOneFOneB;
  config.train.microbatches = 1;
  return config;
}
}  // namespace

WholeParameters read_whole_parameters(const std::string& path) {
  WholeParameters whole{plan_layout(one_process_config(path)), {}};
  for (const auto& p : whole.layout.params) whole.tensors.push_back(at::zeros(p.sharding.shard_shape(), at::kFloat));
  const nlohmann::json index = read_checked_index(path, whole.layout.model);
  at::NoGradGuard no_grad;
  read_arrays(path, index, whole.layout, /*rank=*/0, restore_parameter_array_only,
              [&](const std::string&, size_t i) -> at::Tensor& { return whole.tensors[i]; });
  return whole;
}

std::string checkpoint_config_yaml(const std::string& path) {
  const std::string index_path = path + "/index.json";
  SPMD_CHECK(fs::exists(index_path), "{}: not a complete checkpoint (no index.json there)", path);
  const nlohmann::json index = read_json_file(index_path, "checkpoint index");
  SPMD_CHECK(index.contains("config") && index["config"].is_string(), "{}: has no config", index_path);
  return index["config"].get<std::string>();
}

}  // namespace spmd
