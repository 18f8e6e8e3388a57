// Builds spmd-inspect's text and JSON from a ModelLayout.
#include "inspect/report.h"

#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "inspect/expert_memory.h"
#include "inspect/memory_estimate.h"
#include "inspect/memory_verdict.h"
#include "inspect/param_groups.h"
#include "inspect/pipeline_report.h"
#include "inspect/text_table.h"
#include "mesh/render.h"
#include "util/error.h"

namespace spmd {

namespace {
int64_t report_element_count(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{1}, std::multiplies<>());
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("({})", fmt::join(shape, ", ")); }

std::string logical_text(const std::vector<std::string>& logical) {
  std::vector<std::string> parts;
  for (const auto& l : logical) parts.push_back(l.empty() ? "-" : l);
  return fmt::format("({})", fmt::join(parts, ", "));
}

nlohmann::json memory_json(const MemoryEstimate& e) {
  const ActivationParts& a = e.activation_parts;
  return {{"params", e.params}, {"grads", e.grads}, {"optimizer", e.optimizer}, {"muon_momentum", e.muon_momentum},
          {"fsdp_gathered", e.fsdp_gathered},
          {"gradient_sends", e.gradient_sends}, {"backward_working_set", e.backward_working_set},
          {"recompute", e.recompute},
          {"activations", e.activations},
          {"activations_per_microbatch", e.activations_per_microbatch},
          {"microbatches_in_flight", e.microbatches_in_flight}, {"total", e.total()},
          {"remat", name_of(e.remat)},
          {"sequence_parallel", !e.sequence_parallel_axes.empty()},
          {"sequence_parallel_axes", e.sequence_parallel_axes},
          {"sequence_parallel_degree", e.sequence_parallel_degree},
          {"context_parallel_axes", e.context_parallel_axes},
          {"context_parallel_degree", e.context_parallel_degree},
          {"context_exchange", name_of(e.context_exchange)},
          {"activation_parts_per_microbatch",
           {{"stage_input", a.stage_input}, {"per_block", a.per_block}, {"blocks", a.blocks}, {"head", a.head}}}};
}

// "activations saved for backward (remat full; sequence parallel over model, T/4; 2 microbatches)"
std::string activations_label(const MemoryEstimate& e) {
  std::vector<std::string> notes;
  if (e.remat != Remat::kNone) notes.push_back("remat " + name_of(e.remat));
  if (!e.sequence_parallel_axes.empty())
    notes.push_back(fmt::format("sequence parallel over {}, T/{}", fmt::join(e.sequence_parallel_axes, "x"),
                                e.sequence_parallel_degree));
  if (!e.context_parallel_axes.empty())
    notes.push_back(fmt::format("context parallel over {}, T/{}{}", fmt::join(e.context_parallel_axes, "x"),
                                e.context_parallel_degree,
                                e.context_exchange == ContextExchange::kRing ? ", ring" : ""));
  if (e.microbatches_in_flight > 1) notes.push_back(fmt::format("{} microbatches", e.microbatches_in_flight));
  std::string label = "activations saved for backward";
  return notes.empty() ? label : fmt::format("{} ({})", label, fmt::join(notes, "; "));
}

// "0", "0,3": the pipeline stages holding a parameter.
std::string stages_text(const ParamLayout& p) { return fmt::format("{}", fmt::join(p.sharding.placement().indices, ",")); }

// One row per parameter (or per repeated block parameter, with a count, unless `all_rows`); a
// `stages` column when the blocks are staged over a mesh axis.
std::string params_table_text(const ModelLayout& layout, bool all_rows) {
  const bool staged = layout.pipeline.stages() > 1;
  std::vector<ParamRow> params;
  for (const auto& p : layout.params) {
    params.push_back({p.info.name,
                      {shape_text(p.info.shape), logical_text(p.info.logical), p.sharding.spec().to_string(),
                       shape_text(p.sharding.shard_shape()), human_bytes(p.sharding.shard_numel() * 4)}});
    if (staged) params.back().cells.push_back(stages_text(p));
  }
  std::vector<FoldedRow> folded;
  if (all_rows) for (auto& p : params) folded.push_back({p.name, p.cells, 1});
  else folded = fold_repeated_blocks(params);
  std::vector<std::vector<std::string>> rows{
      {"parameter", "count", "global shape", "logical axes", "spec", "shard shape", "bytes/device"}};
  if (staged) rows[0].push_back("stages");
  for (const auto& f : folded) {
    rows.push_back({f.name, f.count > 1 ? fmt::format("x{}", f.count) : ""});
    rows.back().insert(rows.back().end(), f.cells.begin(), f.cells.end());
  }
  std::string note = all_rows || folded.size() == params.size()
                         ? ""
                         : fmt::format("({} parameters in {} rows; bytes/device is per parameter; --all lists each)\n",
                                       params.size(), folded.size());
  return text_table(rows, "llllllrl") + note;
}

// This mesh's fullest device (its fullest pipeline stage's) next to one device holding everything.
std::string memory_text(const Config& config, const ModelLayout& layout, std::optional<int64_t> device_bytes) {
  const auto stages = estimate_stages(layout, config);
  const int64_t fullest = fullest_stage(stages);
  const MemoryEstimate& sharded = stages[static_cast<size_t>(fullest)];
  MemoryEstimate single = estimate_unsharded_memory(config.model, config.data.batch_size, config.train.microbatches,
                                                    config.runtime.remat, layout.on_gpu, config.train.optimizer);
  const std::string title = fmt::format(
      "memory per device, fp32 (estimate{})",
      stages.size() > 1 ? fmt::format("; stage {}, the fullest of {}", fullest, stages.size()) : std::string());
  std::vector<std::vector<std::string>> rows{{title, "this mesh", "1 device", "ratio"}};
  auto line = [&](const std::string& what, int64_t a, int64_t b) {
    rows.push_back({"  " + what, human_bytes(a), human_bytes(b),
                    b > 0 ? fmt::format("{:.3f}", static_cast<double>(a) / static_cast<double>(b)) : "-"});
  };
  line("parameters", sharded.params, single.params);
  line("gradients", sharded.grads, single.grads);
  line(config.train.optimizer == Optimizer::kMuon ? "optimizer state (AdamW m, v; Muon momentum)" : "AdamW state (m, v)",
       sharded.optimizer, single.optimizer);
  line("FSDP working set (one block)", sharded.fsdp_gathered, single.fsdp_gathered);
  line("gradients sent to the previous stage", sharded.gradient_sends, single.gradient_sends);
  line("backward working set (widest op)", sharded.backward_working_set, single.backward_working_set);
  line("block recomputed in backward (remat)", sharded.recompute, single.recompute);
  line(activations_label(sharded), sharded.activations, single.activations);
  line("total", sharded.total(), single.total());
  const auto& m = config.model;
  const int64_t positional = num_params(m) - num_params(m, /*include_position_embedding=*/false);
  return text_table(rows, "lrrr") +
         (positional > 0 ? fmt::format("  ({} parameters; {} of them in position embeddings)\n", num_params(m), positional)
                         : fmt::format("  ({} parameters)\n", num_params(m))) +
         "verdict: " + memory_verdict(sharded, config, device_bytes) + "\n";
}

// --show NAME: the parameter's blocks over the mesh.
std::string show_text(const ModelLayout& layout, const std::string& name) {
  for (const auto& p : layout.params)
    if (p.info.name == name) return render_sharding(p.sharding);
  std::vector<std::string> names;
  for (const auto& p : layout.params) names.push_back(p.info.name);
  throw UsageError(fmt::format("--show {}: no such parameter; parameters are: {}", name, fmt::join(names, ", ")));
}
// Routed experts: how many, where, and the parameters a token activates (k of E experts').
struct ExpertSummary {
  ExpertShapes shapes;
  int64_t sparse_layers = 0, active_params = 0;
};

ExpertSummary expert_summary(const ModelLayout& layout) {
  ExpertSummary s;
  s.shapes = expert_shapes(layout);
  s.sparse_layers = static_cast<int64_t>(layout.model.sparse_layers().size());
  for (const auto& p : layout.params) {
    const int64_t n = report_element_count(p.info.shape);
    const bool expert = !p.info.logical.empty() && p.info.logical.front() == "expert";
    s.active_params += expert ? n / s.shapes.experts * s.shapes.per_token : n;
  }
  return s;
}

// What the estimate assumes of routing: under expert parallelism a device's routed rows range from
// the balanced count to max_load() times it; --expert-load picks the point.
std::string routing_text(const ExpertShapes& e) {
  if (e.expert_parallel == 1)
    return e.load > 1 ? "routing: --expert-load changes nothing here: without expert parallelism a device computes "
                        "its own tokens' k rows however they are routed\n"
                      : "";
  const std::string assumed =
      e.load == 1 ? std::string("balanced (--expert-load F sizes them for experts at F x their mean rows)")
                  : fmt::format("{:.2f}x balanced (--expert-load {:g}{})", std::min(e.load, e.max_load()), e.load,
                                e.load > e.max_load() ? ", capped at the most routing can send" : "");
  return fmt::format("routing: a device's routed rows at most {:.2f}x balanced (every token of the group to its "
                     "experts); the activations above assume {}\n",
                     e.max_load(), assumed);
}

std::string experts_text(const ModelLayout& layout) {
  const ExpertSummary s = expert_summary(layout);
  const ExpertShapes& e = s.shapes;
  if (!e.enabled()) return "";
  const std::string where =
      e.expert_parallel > 1
          ? fmt::format("split over {}: {} per device, tokens sent to them and back by all-to-all over {}",
                        fmt::join(e.expert_axes, "x"), e.experts / e.expert_parallel, fmt::join(e.expert_axes, "x"))
          : std::string("all on every device (no [expert, AXIS] rule)");
  return fmt::format("experts: {} per sparse layer in {} of {} layers, {} per token ({} parameters active per token); {}\n",
                     e.experts, s.sparse_layers, layout.model.n_layer, e.per_token, s.active_params, where) +
         routing_text(e);
}

nlohmann::json experts_json(const ModelLayout& layout) {
  const ExpertSummary s = expert_summary(layout);
  const ExpertShapes& e = s.shapes;
  return {{"num_experts", e.experts},         {"per_token", e.per_token},
          {"sparse_layers", s.sparse_layers}, {"active_params", s.active_params},
          {"axes", e.expert_axes},            {"per_device", e.experts / e.expert_parallel},
          {"load", std::min(e.load, e.max_load())}, {"max_load", e.max_load()}};
}
}  // namespace

std::string inspect_text(const Config& config, const ModelLayout& layout, const InspectTextOptions& options) {
  const auto& mesh = layout.mesh;
  const auto& m = config.model;
  std::string out = memory_text(config, layout, options.device_bytes) + "\n";
  out += fmt::format("mesh {}: {} devices\n{}\n", mesh.describe(), mesh.size(), render_mesh(mesh));
  const int64_t per_rank = config.data.batch_size / layout.dp_size(), microbatches = config.train.microbatches;
  out += fmt::format("batch {} over {} (data-parallel degree {}, {} sequences per rank{})\n",
                     config.data.batch_size,
                     layout.batch_axes.empty() ? std::string("no axis")
                                               : fmt::format("{}", fmt::join(layout.batch_axes, "x")),
                     layout.dp_size(), per_rank,
                     microbatches > 1 ? fmt::format(" in {} microbatches of {}", microbatches, per_rank / microbatches)
                                      : std::string());
  if (layout.padded_vocab != m.vocab_size)
    out += fmt::format("vocab {} padded to {}, a multiple of {} ids per shard of the vocab dim ({} padding rows, "
                       "masked out of the loss)\n",
                       m.vocab_size, layout.padded_vocab, kVocabShardMultiple, layout.padded_vocab - m.vocab_size);
  out += experts_text(layout);
  out += "\n" + params_table_text(layout, options.all_rows);
  if (const std::string pipeline = pipeline_text(config, layout); !pipeline.empty()) out += "\n" + pipeline;

  for (const auto& name : options.show_params) out += "\n" + show_text(layout, name);
  return out;
}

nlohmann::json inspect_json(const Config& config, const ModelLayout& layout) {
  const bool staged = layout.pipeline.stages() > 1;
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
    if (staged) params.back()["stages"] = p.sharding.placement().indices;
  }
  const auto stages = estimate_stages(layout, config);
  const int64_t fullest = fullest_stage(stages);
  const MemoryEstimate& sharded = stages[static_cast<size_t>(fullest)];
  MemoryEstimate single = estimate_unsharded_memory(config.model, config.data.batch_size, config.train.microbatches,
                                                    config.runtime.remat, layout.on_gpu, config.train.optimizer);
  int64_t global_param_bytes = 0;
  for (const auto& p : layout.params) global_param_bytes += report_element_count(p.info.shape) * 4;
  nlohmann::json out = {{"mesh", {{"shape", layout.mesh.shape()}, {"axes", layout.mesh.axes()}}},
                        {"batch_axes", layout.batch_axes},
                        {"data_parallel_size", layout.dp_size()},
                        {"vocab_size", config.model.vocab_size},
                        {"padded_vocab_size", layout.padded_vocab},
                        {"params", params},
                        {"totals",
                         {{"param_bytes_global", global_param_bytes},
                          {"param_bytes_per_device", sharded.params},
                          {"per_device", memory_json(sharded)},
                          {"per_device_stage", fullest},
                          {"dominant_term", dominant_term(sharded)},
                          {"single_device", memory_json(single)}}}};
  if (staged) out["pipeline"] = pipeline_json(config, layout);
  if (config.model.moe.enabled()) out["experts"] = experts_json(layout);
  return out;
}

}  // namespace spmd
