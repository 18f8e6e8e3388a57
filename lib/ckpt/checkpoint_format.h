// The on-disk checkpoint format, shared by saving and restoring (Orbax-style). One directory per step:
//   <dir>/step_00000100/index.json            rank 0: mesh, rules, config, every array's blocks
//   <dir>/step_00000100/rank_00003.safetensors each rank: the blocks it writes (ckpt/shard_writer.h)
// Written under step_XXXXXXXX.tmp, fsynced, renamed by rank 0 once every rank is done
// (ckpt/checkpoint_commit.h): a crash mid-save leaves the previous checkpoint as the latest.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "model/params.h"

namespace spmd {

constexpr int kCheckpointFormatVersion = 1;
// The arrays saved per parameter: the parameter and its optimizer's state, AdamW's two moments
// (exp_avg, exp_avg_sq) or, for a Muon matrix (train.optimizer muon), its momentum buffer.
std::vector<std::string> checkpoint_array_kinds(const TrainConfig& train, const ParamInfo& param);

std::string checkpoint_step_dir_name(int64_t step);  // step_00000100
std::string checkpoint_rank_file_name(int rank);     // rank_00003.safetensors
std::string checkpoint_manifest_name(int64_t rank);  // manifest_00003.json (inside the temporary dir only)
// The model's shape as the index records it; restore compares it with the config's.
nlohmann::json checkpoint_model_json(const ModelConfig& model);

// The newest complete checkpoint (one with index.json) under `dir`, if any.
std::optional<std::string> find_latest_checkpoint(const std::string& dir);

}  // namespace spmd
