// Checkpoint -> Hugging Face safetensors, or a from_pretrained folder.
#include "hf/hf_export.h"

#include <filesystem>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_restore.h"
#include "ckpt/safetensors.h"
#include "config/config.h"
#include "data/meta.h"
#include "hf/hf_config.h"
#include "hf/hf_experts.h"
#include "hf/name_map.h"
#include "util/durable_file.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace spmd {

namespace {

void write_weights(const WholeParameters& whole, const std::string& out_path) {
  const HfNameMap& map = hf_map(whole.layout.model);
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < whole.layout.params.size(); ++i) {
    const ParamInfo& info = whole.layout.params[i].info;
    at::Tensor full = whole.tensors[i];
    if (info.padded_dim >= 0) full = full.narrow(info.padded_dim, 0, info.unpadded_size);  // drop vocab padding
    if (is_expert_weights(info)) {  // one tensor per expert, as save_pretrained writes them
      for (auto& t : expert_hf_tensors(map, info, full)) out.push_back(std::move(t));
      continue;
    }
    out.push_back({hf_name(map, info.name), to_hf_layout(map, info, full)});
  }
  const std::string tmp = out_path + ".tmp";
  write_safetensors(tmp, out, {{"format", "pt"}, {"producer", "spmd-train export"}});
  std::error_code ec;
  fs::rename(tmp, out_path, ec);
  if (ec) throw RuntimeError(fmt::format("cannot move {} into place: {}", out_path, ec.message()));
}

// The tokenizer files a checkpoint carries (its tokenizer/ folder: meta.json and a BPE's files),
// but meta.json, which is ours.
void copy_bpe_files(const std::string& checkpoint_dir, const std::string& out_dir) {
  const fs::path meta_path = fs::path(checkpoint_dir) / "tokenizer" / "meta.json";
  std::error_code ec;
  if (!fs::is_regular_file(meta_path, ec)) return;
  const DatasetMeta meta = read_meta(meta_path.string());
  for (const std::string& name : tokenizer_files(meta))
    if (name != "meta.json") fs::copy_file(meta_path.parent_path() / name, fs::path(out_dir) / name);
}

void make_empty_folder(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    SPMD_CHECK(fs::is_directory(dir, ec), "--out {}: exists and is not a folder (a single file must end in "
               ".safetensors)", dir);
    SPMD_CHECK(fs::is_empty(dir, ec), "--out {}: the folder is not empty; export writes a new one", dir);
  }
  fs::create_directories(dir, ec);
  if (ec) throw RuntimeError(fmt::format("--out {}: cannot create the folder: {}", dir, ec.message()));
}

}  // namespace

int export_hf(const std::string& dir, const std::string& out) {
  SPMD_CHECK(fs::exists(dir + "/index.json"), "--checkpoint {}: no index.json there (not a complete checkpoint)",
             dir);
  const bool one_file = out.ends_with(".safetensors");
  // Experts no Hugging Face family has (hf_map) fail here, before the folder and the long read.
  hf_map(parse_config(checkpoint_config_yaml(dir), dir + "/index.json").model);
  if (!one_file) make_empty_folder(out);  // before the long read: a wrong --out fails at once
  // The same reader as --resume and sample: every block checked against the index, the shard
  // files and their checksums.
  const WholeParameters whole = read_whole_parameters(dir);
  if (one_file) {
    write_weights(whole, out);
  } else {
    write_weights(whole, out + "/model.safetensors");
    write_file_durably(out + "/config.json", hf_config_json(whole.layout.model).dump(2) + "\n");
    copy_bpe_files(dir, out);
  }
  return static_cast<int>(whole.layout.params.size());
}

}  // namespace spmd
