// Resolving the logical rules for every GPT-2 parameter on a mesh.
#include "parallel/layout.h"

#include <algorithm>

#include "util/error.h"

namespace spmd {

bool ParamLayout::is_fsdp() const {
  return std::any_of(fsdp_axes.begin(), fsdp_axes.end(), [](const auto& a) { return !a.empty(); });
}

namespace {
std::vector<std::string> concat_axes(const std::vector<std::vector<std::string>>& per_dim, size_t begin, size_t end) {
  std::vector<std::string> out;
  for (size_t d = begin; d < end && d < per_dim.size(); ++d) out.insert(out.end(), per_dim[d].begin(), per_dim[d].end());
  return out;
}
}  // namespace

std::vector<std::string> ParamLayout::input_tp_axes() const {
  return concat_axes(tp_axes, 0, static_cast<size_t>(info.input_dims));
}

std::vector<std::string> ParamLayout::output_tp_axes() const {
  return concat_axes(tp_axes, static_cast<size_t>(info.input_dims), tp_axes.size());
}

std::vector<int64_t> ParamLayout::gathered_shape() const {
  auto shape = sharding.shard_shape();
  for (size_t d = 0; d < shape.size(); ++d) shape[d] *= sharding.mesh().axes_size(fsdp_axes[d]);
  return shape;
}

const ParamLayout& ModelLayout::param(const std::string& name) const {
  for (const auto& p : params)
    if (p.info.name == name) return p;
  throw RuntimeError("no parameter named " + name);
}

ModelLayout plan_layout(const Config& config) {
  Mesh mesh(config.mesh.shape, config.mesh.axes);
  LogicalRules rules(config.sharding_rules, mesh);
  const auto& m = config.model;

  // Activations at block boundaries: ('batch', 'seq', 'embed').
  PartitionSpec activation_spec = rules.resolve({"batch", "seq", "embed"}, "activations (batch, seq, embed)");
  NamedSharding activation_sharding(mesh, activation_spec, {config.data.batch_size, m.block_size, m.n_embd},
                                    "activations (batch, seq, embed) with data.batch_size");
  std::vector<std::string> batch_axes = activation_spec.axes_of(0);

  // The vocab dim may not divide: pad it (as nanoGPT pads 50257 to 50304); padded rows are
  // masked out of the loss.
  PartitionSpec wte_spec = rules.resolve({"vocab", "embed"}, "wte");
  int64_t vocab_parts = mesh.axes_size(wte_spec.axes_of(0));
  int64_t padded_vocab = (m.vocab_size + vocab_parts - 1) / vocab_parts * vocab_parts;

  ModelLayout layout{mesh, rules, m, padded_vocab, batch_axes, activation_spec, {}};
  for (auto& info : gpt2_param_table(m, padded_vocab)) {
    PartitionSpec spec = rules.resolve(info.logical, info.name);
    NamedSharding sharding(mesh, spec, info.shape, info.name);
    std::vector<std::vector<std::string>> fsdp(info.shape.size()), tp(info.shape.size());
    for (size_t d = 0; d < info.shape.size(); ++d) {
      for (const auto& axis : spec.axes_of(d)) {
        bool is_batch = std::find(batch_axes.begin(), batch_axes.end(), axis) != batch_axes.end();
        (is_batch ? fsdp[d] : tp[d]).push_back(axis);
      }
    }
    layout.params.push_back({std::move(info), std::move(sharding), std::move(fsdp), std::move(tp)});
  }
  return layout;
}

}  // namespace spmd
