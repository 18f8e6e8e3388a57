// Builds spmd-inspect's text and JSON from a ModelLayout.
#include "inspect/report.h"

#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "inspect/memory_estimate.h"
#include "mesh/render.h"
#include "util/error.h"

namespace spmd {

namespace {
int64_t product(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{1}, std::multiplies<>());
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("({})", fmt::join(shape, ", ")); }

std::string logical_text(const std::vector<std::string>& logical) {
  std::vector<std::string> parts;
  for (const auto& l : logical) parts.push_back(l.empty() ? "-" : l);
  return fmt::format("({})", fmt::join(parts, ", "));
}

nlohmann::json memory_json(const MemoryEstimate& e) {
  return {{"params", e.params}, {"grads", e.grads}, {"optimizer", e.optimizer},
          {"fsdp_gathered", e.fsdp_gathered}, {"activations", e.activations}, {"total", e.total()}};
}
}  // namespace

nlohmann::json spec_to_json(const PartitionSpec& spec) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& axes : spec.dims) {
    if (axes.empty()) out.push_back(nullptr);
    else if (axes.size() == 1) out.push_back(axes[0]);
    else out.push_back(axes);
  }
  return out;
}

std::string inspect_text(const Config& config, const ModelLayout& layout,
                         const std::vector<std::string>& show_params) {
  const auto& mesh = layout.mesh;
  const auto& m = config.model;
  std::string out = fmt::format("mesh {}: {} devices\n{}\n", mesh.describe(), mesh.size(), render_mesh(mesh));
  out += fmt::format("batch {} over {} (data-parallel degree {}, {} sequences per rank)\n",
                     config.data.batch_size,
                     layout.batch_axes.empty() ? std::string("no axis")
                                               : fmt::format("{}", fmt::join(layout.batch_axes, "x")),
                     layout.dp_size(), config.data.batch_size / layout.dp_size());
  if (layout.padded_vocab != m.vocab_size)
    out += fmt::format("vocab {} padded to {} so the vocab dim divides its shards ({} padding rows, "
                       "masked out of the loss)\n",
                       m.vocab_size, layout.padded_vocab, layout.padded_vocab - m.vocab_size);
  out += "\n";

  struct Row { std::string name, shape, logical, spec, shard, bytes; };
  std::vector<Row> rows{{"parameter", "global shape", "logical axes", "spec", "shard shape", "bytes/device"}};
  for (const auto& p : layout.params)
    rows.push_back({p.info.name, shape_text(p.info.shape), logical_text(p.info.logical),
                    p.sharding.spec().to_string(), shape_text(p.sharding.shard_shape()),
                    human_bytes(p.sharding.shard_numel() * 4)});
  size_t w[6] = {0, 0, 0, 0, 0, 0};
  for (const auto& r : rows) {
    const std::string* cells[] = {&r.name, &r.shape, &r.logical, &r.spec, &r.shard, &r.bytes};
    for (int i = 0; i < 6; ++i) w[i] = std::max(w[i], cells[i]->size());
  }
  for (const auto& r : rows)
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>{}}\n", r.name, w[0], r.shape, w[1],
                       r.logical, w[2], r.spec, w[3], r.shard, w[4], r.bytes, w[5]);

  MemoryEstimate sharded = estimate_memory(layout, config.data.batch_size);
  MemoryEstimate single = estimate_unsharded_memory(m, config.data.batch_size);
  out += fmt::format("\nmemory per device, fp32 (estimate)       {:>12}  {:>12}  {:>7}\n", "this mesh",
                     "1 device", "ratio");
  auto line = [&](const char* what, int64_t a, int64_t b) {
    out += fmt::format("  {:<38} {:>12}  {:>12}  {:>7}\n", what, human_bytes(a), human_bytes(b),
                       b > 0 ? fmt::format("{:.3f}", static_cast<double>(a) / static_cast<double>(b)) : "-");
  };
  line("parameters", sharded.params, single.params);
  line("gradients", sharded.grads, single.grads);
  line("AdamW state (m, v)", sharded.optimizer, single.optimizer);
  line("FSDP working set (one layer)", sharded.fsdp_gathered, single.fsdp_gathered);
  line("activations saved for backward", sharded.activations, single.activations);
  line("total", sharded.total(), single.total());
  out += fmt::format("  ({} parameters; {} of them in position embeddings)\n", gpt2_num_params(m),
                     m.block_size * m.n_embd);

  for (const auto& name : show_params) {
    const ParamLayout* found = nullptr;
    for (const auto& p : layout.params)
      if (p.info.name == name) found = &p;
    if (!found) {
      std::vector<std::string> names;
      for (const auto& p : layout.params) names.push_back(p.info.name);
      throw UsageError(fmt::format("--show {}: no such parameter; parameters are: {}", name, fmt::join(names, ", ")));
    }
    out += "\n" + render_sharding(found->sharding);
  }
  return out;
}

nlohmann::json inspect_json(const Config& config, const ModelLayout& layout) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : layout.params) {
    nlohmann::json logical = nlohmann::json::array();
    for (const auto& l : p.info.logical) logical.push_back(l.empty() ? nlohmann::json(nullptr) : nlohmann::json(l));
    params.push_back({{"name", p.info.name},
                      {"shape", p.info.shape},
                      {"logical", logical},
                      {"spec", spec_to_json(p.sharding.spec())},
                      {"shard_shape", p.sharding.shard_shape()},
                      {"bytes_per_device", p.sharding.shard_numel() * 4}});
  }
  MemoryEstimate sharded = estimate_memory(layout, config.data.batch_size);
  MemoryEstimate single = estimate_unsharded_memory(config.model, config.data.batch_size);
  int64_t global_param_bytes = 0;
  for (const auto& p : layout.params) global_param_bytes += product(p.info.shape) * 4;
  return {{"mesh", {{"shape", layout.mesh.shape()}, {"axes", layout.mesh.axes()}}},
          {"batch_axes", layout.batch_axes},
          {"data_parallel_size", layout.dp_size()},
          {"vocab_size", config.model.vocab_size},
          {"padded_vocab_size", layout.padded_vocab},
          {"params", params},
          {"totals",
           {{"param_bytes_global", global_param_bytes},
            {"param_bytes_per_device", sharded.params},
            {"per_device", memory_json(sharded)},
            {"single_device", memory_json(single)}}}};
}

}  // namespace spmd
