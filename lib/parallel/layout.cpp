// Resolving the logical rules for every GPT-2 parameter on a mesh.
#include "parallel/layout.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "mesh/size_hint.h"
#include "parallel/pipeline_schedule.h"
#include "util/did_you_mean.h"
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

// Each rank's rows of a step split into train.microbatches equal slices (gradient accumulation).
// The config alone cannot check this: the data-parallel degree comes from the mesh and the rules.
void check_microbatches(const Config& config, int64_t dp_size) {
  const int64_t batch = config.data.batch_size, m = config.train.microbatches;
  // m <= batch / dp_size first: dp_size * m cannot overflow after it.
  if (m <= batch / dp_size && batch % (dp_size * m) == 0) return;
  throw UsageError(fmt::format(
      "data.batch_size = {} does not split into train.microbatches = {} equal microbatches on each of "
      "the {} data-parallel rank(s): it must be a multiple of {} (data-parallel degree) x {} (microbatches)",
      batch, m, dp_size, dp_size, m));
}

// Sequence parallelism (`seq` on mesh axes S) splits the residual stream between the
// tensor-parallel layers, so those layers must be split over exactly S; `seq` may not take a batch
// axis (the Flax resolution would silently drop it).
void check_sequence_parallel(const Config& config, const LogicalRules& rules, const std::vector<std::string>& batch_axes,
                             const std::vector<std::string>& seq_axes) {
  for (const auto& rule : config.sharding_rules) {
    if (rule.logical != "seq") continue;
    for (const auto& axis : rule.mesh_axes)
      SPMD_CHECK(std::find(batch_axes.begin(), batch_axes.end(), axis) == batch_axes.end(),
                 "sharding rule [seq, {}]: mesh axis '{}' already shards the batch; sequence parallelism splits the "
                 "sequence over the tensor-parallel axis: map seq to the axis heads and mlp use (e.g. [seq, model]), "
                 "or to null",
                 fmt::join(rule.mesh_axes, ", "), axis);
  }
  if (seq_axes.empty()) return;
  for (const char* name : {"heads", "mlp", "vocab"}) {
    const auto axes = rules.resolve({name}, std::string("sequence parallelism's ") + name).axes_of(0);
    SPMD_CHECK(axes == seq_axes,
               "sequence parallelism: seq is split over {} but {} maps to {}; the split stream must meet layers "
               "tensor-parallel over the same axes: map heads, mlp and vocab to {} as well, or map seq to null",
               fmt::join(seq_axes, ", "), name, axes.empty() ? "null" : fmt::format("{}", fmt::join(axes, ", ")),
               fmt::join(seq_axes, ", "));
  }
}

// The mesh axes of `seq_axes` that no parameter is sharded over: context parallelism's (the
// others are Megatron sequence parallelism's, which must meet tensor-parallel layers).
std::vector<std::string> weight_free_axes(const std::vector<std::string>& seq_axes, const LogicalRules& rules,
                                          const ModelConfig& model, int64_t padded_vocab) {
  std::vector<std::string> used;
  for (const auto& info : param_table(model, padded_vocab)) {
    const PartitionSpec spec = rules.resolve(info.logical, info.name);
    for (size_t d = 0; d < info.logical.size(); ++d)  // experts may share the context axis: their tokens travel
      if (info.logical[d] != "expert")
        for (const auto& axis : spec.axes_of(d)) used.push_back(axis);
  }
  std::vector<std::string> free;
  for (const auto& axis : seq_axes)
    if (std::find(used.begin(), used.end(), axis) == used.end()) free.push_back(axis);
  return free;
}

// Context parallelism cuts every row into 2 x cp head-tail chunks; it composes with data, FSDP,
// tensor-parallel (without Megatron sequence parallelism) and pipeline axes of their own.
void check_context_parallel(const Config& config, const Mesh& mesh, const std::vector<std::string>& context_axes,
                            const std::vector<std::string>& sp_axes, const std::string& stage_axis) {
  if (context_axes.empty()) return;
  const std::string axes = fmt::format("{}", fmt::join(context_axes, ", "));
  const int64_t cp = mesh.axes_size(context_axes), T = config.model.block_size;
  SPMD_CHECK(T % (2 * cp) == 0,
             "model.block_size = {} does not split into 2 x {} head-tail chunks for context parallelism (sharding rule "
             "[seq, {}] over mesh.shape [{}]): set model.block_size to a multiple of {}",
             T, cp, axes, fmt::join(mesh.shape(), ", "), 2 * cp);
  SPMD_CHECK(sp_axes.empty(),
             "sharding rule [seq, ...] splits the sequence over weight-free axes [{}] (context parallelism) and over "
             "tensor-parallel axes [{}] (sequence parallelism) at once; map seq to one kind",
             axes, fmt::join(sp_axes, ", "));
  SPMD_CHECK(std::find(context_axes.begin(), context_axes.end(), stage_axis) == context_axes.end(),
             "sharding rule [seq, {}] splits the sequence over mesh axis '{}', which the rule [layers, {}] stages the "
             "blocks over; give context parallelism its own mesh axis",
             axes, stage_axis, stage_axis);
}

// A rule for a logical name nothing uses is a typo until shown otherwise: `[embd, null]` would
// otherwise surface later as "embed has no rule".
void check_rule_names(const Config& config) {
  const auto& known = model_logical_names();
  for (size_t i = 0; i < config.sharding_rules.size(); ++i) {
    const auto& rule = config.sharding_rules[i];
    if (std::find(known.begin(), known.end(), rule.logical) != known.end()) continue;
    throw UsageError(fmt::format(
        "sharding_rules[{}] [{}, {}]: no parameter or activation has logical axis '{}'{}; the model's logical axes "
        "are {}",
        i, rule.logical, rule.mesh_axes.empty() ? "null" : fmt::format("{}", fmt::join(rule.mesh_axes, ", ")),
        rule.logical, did_you_mean(rule.logical, known), fmt::join(known, ", ")));
  }
}

// Where each logical axis's size comes from: the model's table, plus the batch.
std::vector<SizeSource> layout_size_sources(const Config& config) {
  auto sources = spmd::size_sources(config.model);
  sources.push_back({"batch", "data.batch_size", "data.batch_size", config.data.batch_size,
                     [](int64_t v) { return v; }, ""});
  return sources;
}

// The axes of `axes` a sharding does not use.
std::vector<std::string> unused_axes(const std::vector<std::string>& axes, const PartitionSpec& spec) {
  const auto used = spec.used_axes();
  std::vector<std::string> out;
  for (const auto& a : axes)
    if (std::find(used.begin(), used.end(), a) == used.end()) out.push_back(a);
  return out;
}

// The mesh axis a `layers` rule stages the blocks over ("" for none); it may not shard the batch.
std::string stage_axis(const Config& config, const std::vector<std::string>& batch_axes) {
  for (const auto& rule : config.sharding_rules) {
    if (rule.logical != "layers") continue;
    if (rule.mesh_axes.empty()) return "";
    SPMD_CHECK(rule.mesh_axes.size() == 1,
               "sharding rule [layers, {}] stages the blocks over several mesh axes; name one mesh axis for the "
               "pipeline stages",
               fmt::join(rule.mesh_axes, ", "));
    const std::string& axis = rule.mesh_axes[0];
    SPMD_CHECK(std::find(batch_axes.begin(), batch_axes.end(), axis) == batch_axes.end(),
               "sharding rule [layers, {}] stages the blocks over mesh axis '{}', which the batch is also sharded "
               "over; give the pipeline its own mesh axis",
               axis, axis);
    return axis;
  }
  return "";
}

// Block boundaries per virtual stage (`parts` of them, described by `what`):
// runtime.pipeline_layers when given, else an even split.
std::vector<int64_t> stage_boundaries(const Config& config, int64_t parts, const std::string& what) {
  const int64_t n_layer = config.model.n_layer;
  std::vector<int64_t> counts = config.runtime.pipeline_layers;
  if (counts.empty()) {
    if (n_layer % parts != 0) {
      std::vector<int64_t> divisors;
      for (int64_t d = 1; d <= n_layer; ++d)
        if (n_layer % d == 0) divisors.push_back(d);
      std::vector<int64_t> uneven(static_cast<size_t>(parts), n_layer / parts);
      for (int64_t s = 0; s < n_layer % parts; ++s) ++uneven[static_cast<size_t>(s)];
      throw UsageError(fmt::format(
          "model.n_layer = {} blocks do not split evenly over the {} {}; use a count that divides {} ({}), or set "
          "runtime.pipeline_layers, e.g. [{}]",
          n_layer, parts, what, n_layer, fmt::join(divisors, ", "), fmt::join(uneven, ", ")));
    }
    counts.assign(static_cast<size_t>(parts), n_layer / parts);
  }
  SPMD_CHECK(static_cast<int64_t>(counts.size()) == parts,
             "runtime.pipeline_layers has {} entries but there are {} {}; give one block count per stage", counts.size(),
             parts, what);
  int64_t sum = 0;
  for (int64_t c : counts) sum += c;
  SPMD_CHECK(sum == n_layer, "runtime.pipeline_layers [{}] sums to {} blocks but model.n_layer = {}",
             fmt::join(counts, ", "), sum, n_layer);
  std::vector<int64_t> begin{0};
  for (int64_t c : counts) begin.push_back(begin.back() + c);
  return begin;
}

// runtime.virtual_stages goes with the interleaved schedule, and that schedule with at least two.
int64_t checked_chunks(const RuntimeConfig& rt) {
  if (rt.pipeline_schedule != PipelineSchedule::kInterleaved) {
    SPMD_CHECK(rt.virtual_stages == 1,
               "runtime.virtual_stages = {} needs runtime.pipeline_schedule: interleaved ({} runs one chunk of blocks "
               "per stage); set the schedule to interleaved or runtime.virtual_stages to 1",
               rt.virtual_stages, name_of(rt.pipeline_schedule));
    return 1;
  }
  SPMD_CHECK(rt.virtual_stages >= 2,
             "runtime.pipeline_schedule: interleaved needs runtime.virtual_stages of at least 2 (block chunks per "
             "stage), not {}; with 1 use the 1f1b schedule",
             rt.virtual_stages);
  return rt.virtual_stages;
}

// Every stage needs a microbatch to work on; the interleaved schedule runs them in groups of
// `stages` (Megatron's constraint), so it needs a multiple.
void check_pipeline_microbatches(const Config& config, const std::string& axis, int64_t stages) {
  const int64_t m = config.train.microbatches;
  if (config.runtime.pipeline_schedule == PipelineSchedule::kInterleaved) {
    const int64_t smallest = std::max(stages, (m + stages - 1) / stages * stages);
    SPMD_CHECK(m % stages == 0,
               "train.microbatches = {} does not fit runtime.pipeline_schedule: interleaved over the {} pipeline stages "
               "of mesh axis '{}': it runs microbatches in groups of {}; set train.microbatches to a multiple of {} "
               "(the smallest valid value is {})",
               m, stages, axis, stages, stages, smallest);
  }
  SPMD_CHECK(m >= stages,
             "train.microbatches = {} is fewer than the {} pipeline stages of mesh axis '{}': every stage needs a "
             "microbatch to work on; set train.microbatches to at least {} (more shrinks the bubble)",
             m, stages, axis, stages);
}

PipelineLayout plan_pipeline(const Config& config, const Mesh& mesh, const std::vector<std::string>& batch_axes) {
  const std::string axis = stage_axis(config, batch_axes);
  if (axis.empty()) {
    SPMD_CHECK(config.runtime.pipeline_layers.empty() && config.runtime.virtual_stages == 1,
               "runtime.pipeline_layers or runtime.virtual_stages is set but no sharding rule stages the blocks; add a "
               "rule [layers, <mesh axis>] or remove them");
    return {"", {0, config.model.n_layer}};
  }
  const int64_t stages = mesh.axis_size(axis), chunks = checked_chunks(config.runtime);
  SPMD_CHECK(config.train.sample_every == 0,
             "train.sample_every = {} cannot run on pipeline stages (the rule [layers, {}]): set it to 0 and sample "
             "from a checkpoint with `spmd-train sample`, which runs on any mesh",
             config.train.sample_every, axis);
  check_pipeline_microbatches(config, axis, stages);
  const std::string what =
      chunks == 1 ? fmt::format("stages of mesh axis '{}' (rule [layers, {}])", axis, axis)
                  : fmt::format("virtual stages ({} stages of mesh axis '{}' x runtime.virtual_stages = {})", stages,
                                axis, chunks);
  // Proves the pass order cannot deadlock before any rank runs it (it throws naming the stages).
  pipeline_timetable({config.runtime.pipeline_schedule, stages, chunks, config.train.microbatches});
  return {axis, stage_boundaries(config, stages * chunks, what), chunks};
}

// The stages a parameter lives on: its block's, and the first (last) for the parts used before
// (after) the stack. Tied parameters used at both ends live on both.
Placement placement_of(const ParamInfo& info, const PipelineLayout& pipeline) {
  if (pipeline.axis.empty()) return {};
  std::vector<int64_t> stages;
  if (info.before_stack) stages.push_back(0);
  if (info.after_stack) stages.push_back(pipeline.stages() - 1);
  if (info.layer >= 0) stages.push_back(pipeline.stage_of_layer(info.layer));
  SPMD_ASSERT(!stages.empty(), "parameter {} is used nowhere along the layers", info.name);
  std::sort(stages.begin(), stages.end());
  stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
  return {pipeline.axis, stages};
}
}  // namespace

int64_t PipelineLayout::virtual_stage_of_layer(int64_t layer) const {
  auto it = std::upper_bound(layer_begin.begin(), layer_begin.end(), layer);
  return static_cast<int64_t>(it - layer_begin.begin()) - 1;
}

int64_t PipelineLayout::blocks_of_stage(int64_t stage) const {
  int64_t blocks = 0;
  for (int64_t k = 0; k < chunks; ++k) blocks += chunk_end(stage, k) - chunk_begin(stage, k);
  return blocks;
}

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

std::vector<std::string> ModelLayout::token_axes() const {
  std::vector<std::string> axes = batch_axes;
  axes.insert(axes.end(), context_axes.begin(), context_axes.end());
  return axes;
}

std::vector<std::string> ModelLayout::routing_axes() const {
  std::vector<std::string> axes = token_axes();
  axes.insert(axes.end(), seq_axes.begin(), seq_axes.end());
  if (!pipeline.axis.empty()) axes.push_back(pipeline.axis);
  return axes;
}

int64_t ModelLayout::expert_devices() const {
  for (const ParamLayout& p : params)
    if (!p.expert_axes.empty()) return mesh.axes_size(p.expert_axes);  // one rule splits every sparse layer alike
  return 1;
}

std::vector<std::string> gradient_sum_axes(const ModelLayout& layout, const ParamLayout& p) {
  std::vector<std::string> axes = layout.token_axes();
  for (const auto& dims : p.fsdp_axes)
    for (const auto& a : dims) axes.erase(std::find(axes.begin(), axes.end(), a));
  for (const auto& a : p.expert_axes) {
    const auto it = std::find(axes.begin(), axes.end(), a);
    if (it != axes.end()) axes.erase(it);
  }
  axes.insert(axes.end(), p.sequence_axes.begin(), p.sequence_axes.end());
  return axes;
}

const ParamLayout& ModelLayout::param(const std::string& name) const {
  for (const auto& p : params)
    if (p.info.name == name) return p;
  throw RuntimeError("no parameter named " + name);
}

// Experts spread over a mesh axis receive their tokens from its members by all-to-all: the
// members must hold different tokens (the axis splits the batch or the sequence's context chunks).
void check_expert_axes(const ModelLayout& layout) {
  const auto tokens = layout.token_axes();
  for (const auto& p : layout.params)
    for (const auto& axis : p.expert_axes)
      SPMD_CHECK(std::find(tokens.begin(), tokens.end(), axis) != tokens.end(),
                 "sharding rule [expert, {0}]: mesh axis '{0}' does not split the batch, so each of its members would "
                 "send its experts the same tokens; split the batch over it too (e.g. [batch, [data, {0}]]) or put "
                 "the experts on the data axis ([expert, data]); docs/experts.md",
                 axis);
}

ModelLayout plan_layout(const Config& config) {
  check_rule_names(config);
  Mesh mesh(config.mesh.shape, config.mesh.axes);
  LogicalRules rules(config.sharding_rules, mesh);
  const auto& m = config.model;
  const auto sources = layout_size_sources(config);

  // The vocabulary is padded so that each shard of it is a multiple of 64 ids (as nanoGPT pads
  // 50257 to 50304): the head's products then have a well-aligned N. Padded rows are masked out
  // of the loss.
  PartitionSpec wte_spec = rules.resolve({"vocab", "embed"}, "wte");
  const int64_t vocab_multiple = kVocabShardMultiple * mesh.axes_size(wte_spec.axes_of(0));
  const int64_t padded_vocab = (m.vocab_size + vocab_multiple - 1) / vocab_multiple * vocab_multiple;

  // Activations at block boundaries: ('batch', 'seq', 'embed').
  PartitionSpec activation_spec = rules.resolve({"batch", "seq", "embed"}, "activations (batch, seq, embed)");
  std::vector<std::string> batch_axes = activation_spec.axes_of(0);
  std::vector<std::string> seq_axes = activation_spec.axes_of(1);
  const std::vector<std::string> context_axes = weight_free_axes(seq_axes, rules, m, padded_vocab);
  for (const auto& axis : context_axes) seq_axes.erase(std::find(seq_axes.begin(), seq_axes.end(), axis));
  check_context_parallel(config, mesh, context_axes, seq_axes, stage_axis(config, batch_axes));
  check_dims_divide(mesh, activation_spec, {config.data.batch_size, m.block_size, m.n_embd}, {"batch", "seq", "embed"},
                    sources, "activations (batch, seq, embed)");
  NamedSharding activation_sharding(mesh, activation_spec, {config.data.batch_size, m.block_size, m.n_embd},
                                    "activations (batch, seq, embed) with data.batch_size");
  check_microbatches(config, mesh.axes_size(batch_axes));
  check_sequence_parallel(config, rules, batch_axes, seq_axes);

  ModelLayout layout{mesh, rules, m, padded_vocab, batch_axes, activation_spec, seq_axes, context_axes, {},
                     plan_pipeline(config, mesh, batch_axes)};
  layout.context_exchange = config.runtime.context_exchange;
  layout.on_gpu = config.runtime.device == "cuda";
  for (auto& info : param_table(m, padded_vocab)) {
    PartitionSpec spec = rules.resolve(info.logical, info.name);
    check_dims_divide(mesh, spec, info.shape, info.logical, sources, info.name);
    NamedSharding sharding(mesh, spec, info.shape, info.name, placement_of(info, layout.pipeline));
    std::vector<std::vector<std::string>> fsdp(info.shape.size()), tp(info.shape.size());
    std::vector<std::string> expert;
    for (size_t d = 0; d < info.shape.size(); ++d) {
      for (const auto& axis : spec.axes_of(d)) {
        const bool is_batch = std::find(batch_axes.begin(), batch_axes.end(), axis) != batch_axes.end();
        if (info.logical[d] == "expert") expert.push_back(axis);
        (is_batch && info.logical[d] != "expert" ? fsdp[d] : tp[d]).push_back(axis);
      }
    }
    std::vector<std::string> sequence = info.per_position ? unused_axes(seq_axes, spec) : std::vector<std::string>{};
    if (info.per_head)
      for (const auto& axis : unused_axes(rules.resolve({"heads"}, info.name).axes_of(0), spec))
        if (std::find(sequence.begin(), sequence.end(), axis) == sequence.end()) sequence.push_back(axis);
    layout.params.push_back({std::move(info), std::move(sharding), std::move(fsdp), std::move(tp), std::move(sequence),
                             std::move(expert)});
  }
  check_expert_axes(layout);
  return layout;
}

}  // namespace spmd
