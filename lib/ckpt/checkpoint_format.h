// Names and constants of the on-disk checkpoint format, shared by saving and restoring.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.h"

namespace spmd {

constexpr int kCheckpointFormatVersion = 1;
// The arrays saved per parameter: the parameter and AdamW's two moments.
inline const char* const kCheckpointArrayKinds[] = {"param", "exp_avg", "exp_avg_sq"};

std::string checkpoint_step_dir_name(int64_t step);  // step_00000100
std::string checkpoint_rank_file_name(int rank);     // rank_00003.safetensors
std::string checkpoint_manifest_name(int64_t rank);  // manifest_00003.json (inside the temporary dir only)
// The model's shape as the index records it; restore compares it with the config's.
nlohmann::json checkpoint_model_json(const ModelConfig& model);

}  // namespace spmd
