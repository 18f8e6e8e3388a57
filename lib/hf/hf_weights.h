// The weights of a Hugging Face checkpoint, memory-mapped: one safetensors file, or the shards a
// model.safetensors.index.json names (its weight_map: tensor -> shard file beside it). Tensors may
// be float32, bfloat16 or float16.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "ckpt/safetensors.h"

namespace spmd {

class HfWeights {
 public:
  // `path`: a .safetensors file or a model.safetensors.index.json. UsageError naming the file
  // when a shard is missing, corrupted, or does not hold what the index says.
  explicit HfWeights(const std::string& path);

  const std::string& path() const { return path_; }  // for messages
  bool has(const std::string& name) const { return shard_of_.count(name) > 0; }
  const std::map<std::string, size_t>& names() const { return shard_of_; }  // tensor -> shard index
  const SafetensorsEntry& entry(const std::string& name) const;
  // A read-only view in the tensor's own dtype (valid while this object lives).
  at::Tensor tensor(const std::string& name) const;
  const unsigned char* bytes(const std::string& name) const;

 private:
  const SafetensorsFile& file_of(const std::string& name) const;
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, size_t> shard_of_;
};

}  // namespace spmd
