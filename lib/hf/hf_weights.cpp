// Hugging Face weights, one file or sharded (see hf_weights.h).
#include "hf/hf_weights.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_file.h"

namespace fs = std::filesystem;

namespace spmd {

HfWeights::HfWeights(const std::string& path) : path_(path) {
  if (!path.ends_with(".index.json")) {
    shards_.push_back(std::make_unique<SafetensorsFile>(path));
    for (const auto& [name, entry] : shards_[0]->entries()) shard_of_[name] = 0;
    return;
  }
  const nlohmann::json index = read_json_file(path, "train.init_from: safetensors index");
  SPMD_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
             "train.init_from: {} has no weight_map object", path);
  std::map<std::string, size_t> shard_index;  // file name -> shards_ index
  for (const auto& [name, file] : index["weight_map"].items()) {
    SPMD_CHECK(file.is_string() && !file.get<std::string>().empty() &&
                   file.get<std::string>().find('/') == std::string::npos,
               "train.init_from: {}: weight_map[\"{}\"] must be a file name beside it", path, name);
    const std::string shard = file.get<std::string>();
    auto [it, added] = shard_index.emplace(shard, shards_.size());
    if (added) shards_.push_back(std::make_unique<SafetensorsFile>((fs::path(path).parent_path() / shard).string()));
    SPMD_CHECK(shards_[it->second]->entries().count(name),
               "train.init_from: {} puts tensor '{}' in {}, which does not hold it", path, name, shard);
    shard_of_[name] = it->second;
  }
}

const SafetensorsFile& HfWeights::file_of(const std::string& name) const {
  auto it = shard_of_.find(name);
  SPMD_CHECK(it != shard_of_.end(), "train.init_from {}: has no tensor '{}'", path_, name);
  return *shards_[it->second];
}

const SafetensorsEntry& HfWeights::entry(const std::string& name) const {
  return file_of(name).entries().at(name);
}

at::Tensor HfWeights::tensor(const std::string& name) const { return file_of(name).float_tensor(name); }

const unsigned char* HfWeights::bytes(const std::string& name) const { return file_of(name).bytes(name); }

}  // namespace spmd
