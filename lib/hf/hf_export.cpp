// Checkpoint -> one Hugging Face GPT-2 safetensors file.
#include "hf/hf_export.h"

#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "ckpt/checkpoint_restore.h"
#include "ckpt/safetensors.h"
#include "hf/name_map.h"
#include "util/error.h"

namespace spmd {

int export_hf_gpt2(const std::string& dir, const std::string& out_path) {
  SPMD_CHECK(std::filesystem::exists(dir + "/index.json"), "--checkpoint {}: no index.json there (not a complete checkpoint)",
             dir);
  // The same reader as --resume and sample: every block checked against the index, the shard
  // files and their checksums.
  const WholeParameters whole = read_whole_parameters(dir);
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < whole.layout.params.size(); ++i) {
    const ParamInfo& info = whole.layout.params[i].info;
    at::Tensor full = whole.tensors[i];
    if (info.padded_dim >= 0) full = full.narrow(info.padded_dim, 0, info.unpadded_size);  // drop vocab padding
    out.push_back({hf_name(gpt2_hf_map(), info.name), full.contiguous().reshape(hf_shape(info))});
  }
  const std::string tmp = out_path + ".tmp";
  write_safetensors(tmp, out, {{"format", "pt"}, {"producer", "spmd-train export"}});
  std::error_code ec;
  std::filesystem::rename(tmp, out_path, ec);
  if (ec) throw RuntimeError(fmt::format("cannot move {} into place: {}", out_path, ec.message()));
  return static_cast<int>(out.size());
}

}  // namespace spmd
