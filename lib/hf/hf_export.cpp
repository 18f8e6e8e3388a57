// Checkpoint -> one Hugging Face GPT-2 safetensors file.
#include "hf/hf_export.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hf/name_map.h"
#include "ckpt/safetensors.h"
#include "util/error.h"
#include "util/json_file.h"

namespace spmd {

namespace {
// The parameter table of the network an index describes (names and shapes only).
std::map<std::string, ParamInfo> param_infos(const nlohmann::json& index) {
  const auto& m = index.at("model");
  ModelConfig model;
  model.vocab_size = m.at("vocab_size").get<int64_t>();
  model.block_size = m.at("block_size").get<int64_t>();
  model.n_layer = m.at("n_layer").get<int64_t>();
  model.n_head = m.at("n_head").get<int64_t>();
  model.n_embd = m.at("n_embd").get<int64_t>();
  model.bias = m.at("bias").get<bool>();
  std::map<std::string, ParamInfo> infos;
  for (auto& p : gpt2_param_table(model, index.at("padded_vocab").get<int64_t>())) infos[p.name] = p;
  return infos;
}
}  // namespace

int export_hf_gpt2(const std::string& dir, const std::string& out_path) {
  const std::string index_path = dir + "/index.json";
  SPMD_CHECK(std::ifstream(index_path).good(), "--checkpoint {}: no index.json there (not a complete checkpoint)", dir);
  const nlohmann::json index = read_json_file(index_path, "checkpoint index");
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
  std::vector<NamedTensor> out;
  try {
    const std::map<std::string, ParamInfo> infos = param_infos(index);
    for (const auto& array : index.at("arrays")) {
      const std::string name = array.at("name").get<std::string>();
      if (name.rfind("param/", 0) != 0) continue;  // optimizer state is not exported
      const std::string param = name.substr(6);
      auto shape = array.at("shape").get<std::vector<int64_t>>();
      SPMD_CHECK(infos.count(param), "{}: array '{}' is not a GPT-2 parameter", index_path, name);
      const ParamInfo& info = infos.at(param);
      SPMD_CHECK(shape == info.shape, "{}: array '{}' has shape {} but its model section says {}", index_path, name,
                 array.at("shape").dump(), nlohmann::json(info.shape).dump());
      at::Tensor full = at::zeros(shape, at::kFloat);
      for (const auto& block : array.at("blocks")) {
        const std::string file_name = block.at("file").get<std::string>();
        auto& file = files[file_name];
        if (!file) {
          SPMD_CHECK(std::filesystem::exists(dir + "/" + file_name), "checkpoint file {}/{} is missing", dir, file_name);
          file = std::make_unique<SafetensorsFile>(dir + "/" + file_name);
        }
        const std::string tensor = block.at("tensor").get<std::string>();
        const auto& e = file->entries().at(tensor);
        SPMD_CHECK(checksum_matches(block.at("checksum").get<std::string>(), file->bytes(tensor), e.end - e.begin),
                   "checkpoint file {}/{}: checksum mismatch for '{}' (corrupted)", dir, file_name, tensor);
        auto offset = block.at("offset").get<std::vector<int64_t>>();
        at::Tensor dst = full;
        for (size_t d = 0; d < offset.size(); ++d)
          dst = dst.narrow(static_cast<int64_t>(d), offset[d], e.shape[d]);
        dst.copy_(file->tensor(tensor));
      }
      if (info.padded_dim >= 0) full = full.narrow(info.padded_dim, 0, info.unpadded_size);  // drop vocab padding
      out.push_back({hf_name(gpt2_hf_map(), param), full.contiguous().reshape(hf_shape(info))});
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}: malformed checkpoint index: {}", index_path, e.what()));
  }
  const std::string tmp = out_path + ".tmp";
  write_safetensors(tmp, out, {{"format", "pt"}, {"producer", "spmd-train export"}});
  std::error_code ec;
  std::filesystem::rename(tmp, out_path, ec);
  if (ec) throw RuntimeError(fmt::format("cannot move {} into place: {}", out_path, ec.message()));
  return static_cast<int>(out.size());
}

}  // namespace spmd
