// Checkpoint -> one Hugging Face GPT-2 safetensors file.
#include "ckpt/export.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "util/error.h"

namespace spmd {

namespace {
// Our parameter name -> (HF name, HF shape given n_embd). Our weights are already (in, out) like
// GPT-2's Conv1D; attention tensors only fold their (heads, head_dim) dims back together.
std::string hf_name(const std::string& name) {
  if (name == "wte" || name == "wpe") return "transformer." + name + ".weight";
  return "transformer." + name;
}
}  // namespace

int export_hf_gpt2(const std::string& dir, const std::string& out_path) {
  const std::string index_path = dir + "/index.json";
  std::ifstream in(index_path);
  SPMD_CHECK(in.good(), "--checkpoint {}: no index.json there (not a complete checkpoint)", dir);
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("{} is corrupted: {}", index_path, e.what()));
  }
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
  std::vector<NamedTensor> out;
  try {
    const int64_t vocab = index.at("model").at("vocab_size").get<int64_t>();
    const int64_t C = index.at("model").at("n_embd").get<int64_t>();
    for (const auto& array : index.at("arrays")) {
      const std::string name = array.at("name").get<std::string>();
      if (name.rfind("param/", 0) != 0) continue;  // optimizer state is not exported
      const std::string param = name.substr(6);
      auto shape = array.at("shape").get<std::vector<int64_t>>();
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
        SPMD_CHECK(fmt::format("{:016x}", checksum_bytes(file->bytes(tensor), e.end - e.begin)) ==
                       block.at("checksum").get<std::string>(),
                   "checkpoint file {}/{}: checksum mismatch for '{}' (corrupted)", dir, file_name, tensor);
        auto offset = block.at("offset").get<std::vector<int64_t>>();
        at::Tensor dst = full;
        for (size_t d = 0; d < offset.size(); ++d)
          dst = dst.narrow(static_cast<int64_t>(d), offset[d], e.shape[d]);
        dst.copy_(file->tensor(tensor));
      }
      if (param == "wte") full = full.narrow(0, 0, vocab);  // drop vocab padding
      if (param.find("attn.c_attn.weight") != std::string::npos) full = full.reshape({C, 3 * C});
      if (param.find("attn.c_attn.bias") != std::string::npos) full = full.reshape({3 * C});
      if (param.find("attn.c_proj.weight") != std::string::npos) full = full.reshape({C, C});
      out.push_back({hf_name(param), full.contiguous()});
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
