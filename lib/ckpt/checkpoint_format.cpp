// Names of the checkpoint format's files.
#include "ckpt/checkpoint_format.h"

#include <fmt/format.h>

namespace spmd {

std::string checkpoint_step_dir_name(int64_t step) { return fmt::format("step_{:08d}", step); }
std::string checkpoint_rank_file_name(int rank) { return fmt::format("rank_{:05d}.safetensors", rank); }
std::string checkpoint_manifest_name(int64_t rank) { return fmt::format("manifest_{:05d}.json", rank); }

nlohmann::json checkpoint_model_json(const ModelConfig& m) {
  return {{"vocab_size", m.vocab_size}, {"block_size", m.block_size}, {"n_layer", m.n_layer},
          {"n_head", m.n_head},         {"n_embd", m.n_embd},         {"bias", m.bias}};
}

}  // namespace spmd
