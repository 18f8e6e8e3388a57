// Config loading: YAML file + `--set` overrides -> typed, validated Config (see config.h).
// Parsing and error locations live in yaml_reader; this file is the schema and its rules.
#include "config/config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "config/config_schema.h"
#include "config/yaml_reader.h"
#include "mesh/mesh.h"
#include "util/error.h"

namespace spmd {
namespace {

// Limits past which a config cannot describe a real run. They keep every size that the layout
// planner and the memory estimate compute in int64 far from overflow (signed overflow is
// undefined behaviour), and a typo such as n_layer: 2000000000 an error instead of an
// hours-long, memory-eating plan. (The mesh's limit is kMaxMeshDevices, in mesh/mesh.h.)
constexpr int64_t kMaxLayers = 1024;                  // parameter tables are per layer
constexpr int64_t kMaxRunBytes = int64_t{1} << 60;    // 1 EiB of fp32 training state

// ---------------------------------------------------------------------------- section tables
// One entry per key, in the order keys are read, listed in messages and emitted.

using namespace schema;

// model.rope_scaling: {factor, low_freq_factor, high_freq_factor, original_max_position_embeddings},
// all four given (as Llama 3's config.json has them); null or absent: no scaling.
Field<ModelConfig> rope_scaling_field() {
  const std::string key = "rope_scaling";
  const std::vector<std::string> keys{"factor", "low_freq_factor", "high_freq_factor",
                                      "original_max_position_embeddings"};
  auto read = [key, keys](const MapReader& r, ModelConfig& m) {
    if (!r.has(key) || r.get(key).IsNull()) return;
    r.check(key, r.get(key).IsMap(), "expected a map {" + fmt::format("{}", fmt::join(keys, ", ")) + "}");
    const MapReader s = r.section(key, keys);
    for (const auto& k : keys)
      if (!s.has(k)) s.fail(k, "missing: rope_scaling takes all of " + fmt::format("{}", fmt::join(keys, ", ")));
    RopeScaling& rs = m.rope_scaling;
    s.read("factor", rs.factor);
    s.read("low_freq_factor", rs.low_freq_factor);
    s.read("high_freq_factor", rs.high_freq_factor);
    s.read("original_max_position_embeddings", rs.original_max_position_embeddings);
    s.check("factor", rs.factor >= 1 && std::isfinite(rs.factor), "expected a number >= 1");
    s.check("low_freq_factor", rs.low_freq_factor > 0 && std::isfinite(rs.low_freq_factor),
            "expected a positive number");
    s.check("high_freq_factor", rs.high_freq_factor > rs.low_freq_factor && std::isfinite(rs.high_freq_factor),
            fmt::format("expected a number above low_freq_factor = {}", format_double(rs.low_freq_factor)));
    s.check("original_max_position_embeddings", rs.original_max_position_embeddings > 0,
            "expected a positive integer");
  };
  auto emit = [key](YAML::Emitter& out, const ModelConfig& m) {
    const RopeScaling& rs = m.rope_scaling;
    out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
    emit_value(out, "factor", rs.factor);
    emit_value(out, "low_freq_factor", rs.low_freq_factor);
    emit_value(out, "high_freq_factor", rs.high_freq_factor);
    emit_value(out, "original_max_position_embeddings", rs.original_max_position_embeddings);
    out << YAML::EndMap;
  };
  return {key, read, emit};
}

// A positive integer whose default, 0, stands for a value derived from other keys after reading
// (read_model): checked only where given.
Field<ModelConfig> positive_if_given(const std::string& key, int64_t ModelConfig::*member) {
  Field<ModelConfig> f = plain(key, member);
  f.read = [key, member](const MapReader& r, ModelConfig& m) {
    if (!r.has(key)) return;
    r.read(key, m.*member);
    r.check(key, m.*member > 0, "expected a positive integer");
  };
  return f;
}

// model.moe.mlp_only_layers: a list of distinct layer indices (checked against n_layer after reading).
Field<MoeConfig> mlp_only_layers_field() {
  const std::string key = "mlp_only_layers";
  auto read = [key](const MapReader& r, MoeConfig& m) {
    if (!r.has(key) || r.get(key).IsNull()) return;
    const YAML::Node list = r.get(key);
    r.check(key, list.IsSequence(), "expected a list of layer indices, e.g. [0, 3]");
    m.mlp_only_layers.clear();
    for (size_t i = 0; i < list.size(); ++i) {
      const double v = yaml_double(r.doc(), list[i], r.item_path(key, i), r.item_mark(key, i));
      r.check_item(key, i, v >= 0 && v == std::floor(v) && v <= static_cast<double>(kMaxLayers),
                   "expected a layer index (a non-negative integer)");
      m.mlp_only_layers.push_back(static_cast<int64_t>(v));
    }
  };
  auto emit = [key](YAML::Emitter& out, const MoeConfig& m) {
    if (m.mlp_only_layers.empty()) return;
    out << YAML::Key << key << YAML::Value << YAML::Flow << m.mlp_only_layers;
  };
  return {key, read, emit};
}

const Section<MoeConfig>& moe_section() {
  using M = MoeConfig;
  static const Section<M> section{"moe", {
      at_least("num_experts", &M::num_experts, 0),
      positive("num_experts_per_tok", &M::num_experts_per_tok),
      at_least("moe_intermediate_size", &M::moe_intermediate_size, 0),
      plain("norm_topk_prob", &M::norm_topk_prob),
      non_negative("router_aux_loss_coef", &M::router_aux_loss_coef),
      mlp_only_layers_field(),
      positive("decoder_sparse_step", &M::decoder_sparse_step),
      at_least("shared_expert_intermediate_size", &M::shared_expert_intermediate_size, 0),
      checked("expert_bias_update_rate", &M::expert_bias_update_rate,
              [](double v) { return v >= 0 && std::isfinite(v); }, "expected a non-negative number"),
  }};
  return section;
}

// model.moe: a nested map read by moe_section; emitted only for a model with experts.
Field<ModelConfig> moe_field() {
  auto read = [](const MapReader& r, ModelConfig& m) {
    if (!r.has("moe") || r.get("moe").IsNull()) return;
    r.check("moe", r.get("moe").IsMap(), "expected a map of expert settings (docs/experts.md)");
    moe_section().read(r, m.moe);
  };
  auto emit = [](YAML::Emitter& out, const ModelConfig& m) {
    if (m.moe.enabled()) moe_section().emit(out, m.moe);
  };
  return {"moe", read, emit};
}

const Section<ModelConfig>& model_section() {
  using M = ModelConfig;
  auto llama = [](const M& m) { return m.arch == ModelArch::kLlama; };
  static const Section<M> section{"model", {
      positive("vocab_size", &M::vocab_size),
      positive("block_size", &M::block_size),
      positive("n_layer", &M::n_layer)
          .also([](const M& m) { return m.n_layer <= kMaxLayers; },
                fmt::format("expected at most {} layers", kMaxLayers)),
      positive("n_head", &M::n_head),
      positive("n_embd", &M::n_embd),
      fraction("dropout", &M::dropout),
      plain("bias", &M::bias),
      enum_choice("matmul_dtype", &M::matmul_dtype, {MatmulDtype::kFloat32, MatmulDtype::kBFloat16}),
      enum_choice("arch", &M::arch, {ModelArch::kGpt2, ModelArch::kLlama}).emitted_if(llama),
      positive_if_given("n_kv_head", &M::n_kv_head).emitted_if(llama),
      positive_if_given("intermediate_size", &M::intermediate_size).emitted_if(llama),
      checked("rms_norm_eps", &M::rms_norm_eps, [](double v) { return v > 0 && v < 1; },
              "expected a number in (0, 1)").emitted_if(llama),
      checked("rope_theta", &M::rope_theta, [](double v) { return v > 1 && std::isfinite(v); },
              "expected a number above 1").emitted_if(llama),
      rope_scaling_field().emitted_if([](const M& m) { return m.rope_scaling.factor > 0; }),
      plain("tie_embeddings", &M::tie_embeddings).emitted_if(llama),
      plain("qk_norm", &M::qk_norm).emitted_if([](const M& m) { return m.qk_norm; }),
      positive_if_given("head_dim", &M::attention_head_dim).emitted_if([](const M& m) { return m.attention_head_dim > 0; }),
      moe_field(),
  }};
  return section;
}

// data.sources: a list of {name, path, weight, val}; names unique, weights positive and finite.
// Each item is read like a section (unknown keys are errors, with a suggestion).
Field<DataConfig> data_sources() {
  const std::string key = "sources";
  auto read = [key](const MapReader& r, DataConfig& d) {
    if (!r.has(key) || r.get(key).IsNull()) return;  // null: no blend (--set data.sources=null)
    const YAML::Node list = r.get(key);
    r.check(key, list.IsSequence() && list.size() > 0, "expected a list of {name, path, weight} maps");
    d.sources.clear();
    for (size_t i = 0; i < list.size(); ++i) {
      MapReader item(r.doc(), list[i], r.item_path(key, i), {"name", "path", "weight", "val"}, r.item_mark(key, i));
      DataSource source;
      item.read("name", source.name);
      item.read("path", source.path);
      item.read("weight", source.weight);
      item.read("val", source.val);
      item.check("name", !source.name.empty() && source.name.find_first_of("/ \t") == std::string::npos,
                 "expected a non-empty name without '/' or spaces (it names val_loss/<name>)");
      item.check("path", !source.path.empty(), "expected the source's prepared token data");
      item.check("weight", source.weight > 0 && std::isfinite(source.weight), "expected a positive number");
      for (const DataSource& earlier : d.sources)
        item.check("name", earlier.name != source.name, "expected a name no other source has");
      d.sources.push_back(std::move(source));
    }
  };
  auto emit = [key](YAML::Emitter& out, const DataConfig& d) {
    if (d.sources.empty()) return;
    out << YAML::Key << key << YAML::Value << YAML::BeginSeq;
    for (const DataSource& s : d.sources) {
      out << YAML::Flow << YAML::BeginMap;
      emit_value(out, "name", s.name);
      emit_value(out, "path", s.path);
      emit_value(out, "weight", s.weight);
      if (!s.val.empty()) emit_value(out, "val", s.val);
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  };
  return {key, read, emit};
}

const Section<DataConfig>& data_section() {
  using D = DataConfig;
  static const Section<D> section{"data", {
      plain("train", &D::train),  // existence is the data loader's business
      data_sources(),
      plain("val", &D::val),
      positive("batch_size", &D::batch_size),
      at_least("window_stride", &D::window_stride, 0),
      plain("document_mask", &D::document_mask).emitted_if([](const D& d) { return d.document_mask; }),
      at_least("eot_token", &D::eot_token, -1).emitted_if([](const D& d) { return d.eot_token >= 0; }),
  }};
  return section;
}

// train.muon.ns_coefficients: the quintic's (a, b, c), a list of three finite numbers.
Field<MuonConfig> ns_coefficients_field() {
  const std::string key = "ns_coefficients";
  auto read = [key](const MapReader& r, MuonConfig& m) {
    if (!r.has(key)) return;
    const YAML::Node list = r.get(key);
    r.check(key, list.IsSequence() && list.size() == 3, "expected a list of three numbers [a, b, c]");
    for (size_t i = 0; i < 3; ++i) {
      m.ns_coefficients[i] = yaml_double(r.doc(), list[i], r.item_path(key, i), r.item_mark(key, i));
      r.check_item(key, i, std::isfinite(m.ns_coefficients[i]), "expected a finite number");
    }
  };
  auto emit = [key](YAML::Emitter& out, const MuonConfig& m) {
    out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (double c : m.ns_coefficients) out << format_double(c);
    out << YAML::EndSeq;
  };
  return {key, read, emit};
}

const Section<MuonConfig>& muon_section() {
  using M = MuonConfig;
  static const Section<M> section{"muon", {
      checked("lr", &M::lr, [](double v) { return v > 0 && std::isfinite(v); }, "expected a positive number"),
      non_negative("weight_decay", &M::weight_decay),
      fraction("momentum", &M::momentum),
      plain("nesterov", &M::nesterov),
      checked("ns_steps", &M::ns_steps, [](int64_t v) { return v >= 1 && v < 100; },
              "expected an integer in [1, 99] (torch's limit)"),
      ns_coefficients_field(),
      checked("eps", &M::eps, [](double v) { return v > 0 && std::isfinite(v); }, "expected a positive number"),
      enum_choice("adjust_lr_fn", &M::adjust_lr_fn, {MuonAdjustLr::kOriginal, MuonAdjustLr::kMatchRmsAdamW}),
      enum_choice("ns_dtype", &M::ns_dtype, {MatmulDtype::kBFloat16, MatmulDtype::kFloat32}),
  }};
  return section;
}

// train.muon: a nested map read by muon_section; emitted where it matters (optimizer muon, or
// settings given), so the resolved config of an AdamW run stays as it was.
Field<TrainConfig> muon_field() {
  auto read = [](const MapReader& r, TrainConfig& t) {
    if (!r.has("muon") || r.get("muon").IsNull()) return;
    r.check("muon", r.get("muon").IsMap(), "expected a map of Muon settings");
    muon_section().read(r, t.muon);
  };
  auto emit = [](YAML::Emitter& out, const TrainConfig& t) {
    if (t.optimizer == Optimizer::kMuon || !(t.muon == MuonConfig{})) muon_section().emit(out, t.muon);
  };
  return {"muon", read, emit};
}

const Section<TrainConfig>& train_section() {
  using T = TrainConfig;
  static const Section<T> section{"train", {
      positive("steps", &T::steps),
      enum_choice("lr_schedule", &T::lr_schedule,
                  {LrSchedule::kCosine, LrSchedule::kWsd, LrSchedule::kLinear, LrSchedule::kConstant}),
      at_least("decay_steps", &T::decay_steps, 0),
      enum_choice("decay_shape", &T::decay_shape,
                  {DecayShape::kLinear, DecayShape::kCosine, DecayShape::kOneMinusSqrt})
          .emitted_if([](const T& t) { return t.lr_schedule == LrSchedule::kWsd; }),
      plain("seed", &T::seed),
      checked("lr", &T::lr, [](double v) { return v > 0; }, "expected a positive number"),
      non_negative("min_lr", &T::min_lr),
      at_least("warmup_steps", &T::warmup_steps, 0),
      non_negative("weight_decay", &T::weight_decay),
      fraction("beta1", &T::beta1),
      fraction("beta2", &T::beta2),
      non_negative("grad_clip", &T::grad_clip),
      enum_choice("optimizer", &T::optimizer, {Optimizer::kAdamW, Optimizer::kMuon})
          .emitted_if([](const T& t) { return t.optimizer != Optimizer::kAdamW; }),
      muon_field(),
      at_least("eval_every", &T::eval_every, 0),
      positive("eval_batches", &T::eval_batches),
      positive("log_every", &T::log_every),
      plain("skip_nonfinite", &T::skip_nonfinite),
      // Divisibility by data-parallel degree x microbatches needs the mesh layout: plan_layout
      // checks it.
      at_least("microbatches", &T::microbatches, 1),
      at_least("sample_every", &T::sample_every, 0),
      plain("init_from", &T::init_from),  // checked against model.* by check_hf_checkpoint
  }};
  return section;
}

// One task of eval.tasks (a map of its own in the list).
const Section<EvalTask>& eval_task_section() {
  using E = EvalTask;
  static const Section<E> section{"tasks", {
      checked("name", &E::name,
              [](const std::string& v) {
                return !v.empty() && v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") ==
                                         std::string::npos;
              },
              "expected a name of letters, digits, '_', '-' or '.' (it names the metrics eval/<name>/...)"),
      checked("path", &E::path, [](const std::string& v) { return !v.empty(); },
              "expected the task file (HellaSwag's JSON Lines)"),
      positive("every", &E::every),
      at_least("limit", &E::limit, 0),
  }};
  return section;
}

// eval: {tasks: [{name, path, every, limit}, ...]}: names unique, name and path required.
EvalConfig read_eval(const MapReader& top) {
  EvalConfig e;
  const MapReader r = top.section("eval", {"tasks"});
  const YAML::Node list = r.get("tasks");
  if (!list.IsDefined() || list.IsNull()) return e;
  if (!list.IsSequence()) r.fail("tasks", "expected a list of {name, path, every, limit} maps, got " + describe_yaml(list));
  const auto& section = eval_task_section();
  for (size_t i = 0; i < list.size(); ++i) {
    const MapReader item(r.doc(), list[i], r.item_path("tasks", i), section.keys(), r.item_mark("tasks", i));
    EvalTask task;
    for (const auto& f : section.fields) f.read(item, task);
    for (const char* key : {"name", "path"})
      if (!item.has(key)) item.fail(key, "is required");
    for (const auto& other : e.tasks)
      if (other.name == task.name) item.fail("name", fmt::format("'{}' names two tasks", task.name));
    e.tasks.push_back(std::move(task));
  }
  return e;
}

void emit_eval(YAML::Emitter& out, const EvalConfig& e) {
  if (e.tasks.empty()) return;
  out << YAML::Key << "eval" << YAML::Value << YAML::BeginMap << YAML::Key << "tasks" << YAML::Value << YAML::BeginSeq;
  for (const auto& task : e.tasks) {
    out << YAML::Flow << YAML::BeginMap;
    for (const auto& f : eval_task_section().fields) f.emit(out, task);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
}

const Section<CheckpointConfig>& checkpoint_section() {
  using C = CheckpointConfig;
  static const Section<C> section{"checkpoint", {
      plain("dir", &C::dir),
      at_least("every", &C::every, 0),
      at_least("keep", &C::keep, 1),
      plain("async", &C::async),
  }};
  return section;
}

const Section<OutputConfig>& output_section() {
  static const Section<OutputConfig> section{"output", {plain("dir", &OutputConfig::dir)}};
  return section;
}

// 'auto' or a count; RuntimeConfig stores 'auto' as 0, and 0 is emitted back as 'auto'.
Field<RuntimeConfig> threads_per_rank() {
  const std::string key = "threads_per_rank";
  auto read = [key](const MapReader& r, RuntimeConfig& rt) {
    if (!r.has(key)) return;
    const YAML::Node v = r.get(key);
    std::optional<int64_t> n;
    if (v.IsScalar()) n = v.Scalar() == "auto" ? std::optional<int64_t>(0) : parse_int(v.Scalar());
    r.check(key, n && *n >= 0, "expected 'auto' or a non-negative integer");
    rt.threads_per_rank = *n;
  };
  auto emit = [key](YAML::Emitter& out, const RuntimeConfig& rt) {
    if (rt.threads_per_rank == 0) {
      emit_value(out, key, std::string("auto"));
    } else {
      emit_value(out, key, rt.threads_per_rank);
    }
  };
  return {key, read, emit};
}

const Section<RuntimeConfig>& runtime_section() {
  using R = RuntimeConfig;
  auto all_positive = [](const std::vector<int64_t>& counts) {
    return std::all_of(counts.begin(), counts.end(), [](int64_t n) { return n > 0; });
  };
  // virtual_stages and pipeline_layers are emitted only when set: most runs have no pipeline.
  static const Section<R> section{"runtime", {
      choice("backend", &R::backend, {"gloo", "nccl", "auto"}),
      choice("device", &R::device, {"cpu", "cuda", "auto"}),
      threads_per_rank(),
      checked("timeout_s", &R::timeout_s, [](double v) { return v > 0; },
              "expected a positive number of seconds"),
      non_negative("grad_bucket_mb", &R::grad_bucket_mb)
          .also([](const R& rt) { return rt.grad_bucket_mb <= 1048576; },
                "expected at most 1048576 (1 TiB)"),
      plain("fsdp_prefetch", &R::fsdp_prefetch),
      plain("tf32", &R::tf32).emitted_if([](const R& rt) { return !rt.tf32; }),
      enum_choice("pipeline_schedule", &R::pipeline_schedule,
                  {PipelineSchedule::kOneFOneB, PipelineSchedule::kGPipe, PipelineSchedule::kInterleaved}),
      at_least("virtual_stages", &R::virtual_stages, 1)
          .emitted_if([](const R& rt) { return rt.virtual_stages != 1; }),
      enum_choice("remat", &R::remat, {Remat::kNone, Remat::kFull, Remat::kSelective}),
      enum_choice("context_exchange", &R::context_exchange, {ContextExchange::kAllGather, ContextExchange::kRing})
          .emitted_if([](const R& rt) { return rt.context_exchange != ContextExchange::kAllGather; }),
      enum_choice("cpu_kernels", &R::cpu_kernels, {CpuKernels::kFused, CpuKernels::kGeneric})
          .emitted_if([](const R& rt) { return rt.cpu_kernels != CpuKernels::kFused; }),
      checked("pipeline_layers", &R::pipeline_layers, all_positive,
              "expected a list of positive block counts, one per pipeline stage")
          .emitted_if([](const R& rt) { return !rt.pipeline_layers.empty(); }),
  }};
  return section;
}

// ---------------------------------------------------------------------------------- sections

MeshConfig read_mesh(const MapReader& top) {
  MeshConfig mesh;
  MapReader r = top.section("mesh", {"shape", "axes"});
  r.read("shape", mesh.shape);
  r.read("axes", mesh.axes);
  r.check("shape", !mesh.shape.empty(), "expected at least one axis size");
  for (size_t i = 0; i < mesh.shape.size(); ++i)
    r.check_item("shape", i, mesh.shape[i] >= 1, "expected an axis size >= 1");
  for (int64_t i = 0, devices = 1; i < static_cast<int64_t>(mesh.shape.size()); ++i) {
    if (mesh.shape[i] > kMaxMeshDevices / devices)  // devices * shape[i], without overflowing
      r.fail("shape", fmt::format("expected at most {} devices in all (the product of the sizes), "
                                  "got [{}]",
                                  kMaxMeshDevices, fmt::join(mesh.shape, ", ")));
    devices *= mesh.shape[i];
  }
  for (size_t i = 0; i < mesh.axes.size(); ++i) {
    r.check_item("axes", i, !mesh.axes[i].empty(), "expected a non-empty axis name");
    auto first = std::find(mesh.axes.begin(), mesh.axes.end(), mesh.axes[i]);
    r.check_item("axes", i, first == mesh.axes.begin() + i,
                 fmt::format("expected unique axis names ('{}' is also axis {})", mesh.axes[i],
                             first - mesh.axes.begin()));
  }
  if (mesh.axes.size() != mesh.shape.size())
    r.fail("axes", fmt::format("has {} name(s) [{}] but mesh.shape has {} size(s) [{}]; give one "
                               "name per axis",
                               mesh.axes.size(), fmt::join(mesh.axes, ", "), mesh.shape.size(),
                               fmt::join(mesh.shape, ", ")));
  return mesh;
}

// Each rule is [logical_name, target]; target is null, one mesh axis, or a list of them.
std::vector<ShardingRule> read_sharding_rules(const MapReader& top, const MeshConfig& mesh) {
  const std::string key = "sharding_rules";
  const YAML::Node list = top.get(key);
  if (!list.IsDefined() || list.IsNull()) return {};
  if (!list.IsSequence())
    top.fail(key, "expected a list of [logical_name, mesh_axes] pairs, got " + describe_yaml(list));

  const std::string shape_help =
      "expected [logical_name, mesh_axes] with mesh_axes null, a mesh axis or a list of them";
  std::vector<ShardingRule> rules;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node rule_node = list[i];
    const std::string path = top.item_path(key, i);
    const YAML::Mark mark = top.item_mark(key, i);
    auto fail = [&](const std::string& message) { top.doc().fail(path, mark, message); };

    if (!rule_node.IsSequence() || rule_node.size() != 2)
      fail(shape_help + ", got " + describe_yaml(rule_node));
    const YAML::Node name = rule_node[0];
    const YAML::Node target = rule_node[1];
    if (!name.IsScalar() || name.Scalar().empty())
      fail("expected a logical axis name first, got " + describe_yaml(name));

    ShardingRule rule{name.Scalar(), {}};
    if (target.IsScalar()) {
      rule.mesh_axes.push_back(target.Scalar());
    } else if (target.IsSequence()) {
      for (const auto& axis : target) {
        if (!axis.IsScalar()) fail(shape_help + "; got " + describe_yaml(axis) + " among its axes");
        rule.mesh_axes.push_back(axis.Scalar());
      }
    } else if (!target.IsNull()) {
      fail(shape_help + ", got " + describe_yaml(target) + " as mesh_axes");
    }

    for (size_t k = 0; k < rule.mesh_axes.size(); ++k) {
      const std::string& axis = rule.mesh_axes[k];
      if (std::find(mesh.axes.begin(), mesh.axes.end(), axis) == mesh.axes.end())
        fail(fmt::format("rule '{}' names mesh axis '{}', which is not in the mesh{}; mesh axes: "
                         "[{}]",
                         rule.logical, axis, did_you_mean(axis, mesh.axes),
                         fmt::join(mesh.axes, ", ")));
      if (std::find(rule.mesh_axes.begin(), rule.mesh_axes.begin() + k, axis) !=
          rule.mesh_axes.begin() + k)
        fail(fmt::format("rule '{}' names mesh axis '{}' twice", rule.logical, axis));
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

// model.moe's rules that involve the rest of the model.
void check_moe(const MapReader& model, const ModelConfig& m) {
  const MoeConfig& e = m.moe;
  if (!e.enabled()) return;
  const MapReader r = moe_section().reader(model);
  r.check("num_experts_per_tok", e.num_experts_per_tok <= e.num_experts,
          fmt::format("{} is more than model.moe.num_experts = {}: each token reaches k distinct experts",
                      e.num_experts_per_tok, e.num_experts));
  for (size_t i = 0; i < e.mlp_only_layers.size(); ++i)
    r.check("mlp_only_layers", e.mlp_only_layers[i] < m.n_layer,
            fmt::format("layer {} does not exist: model.n_layer = {}", e.mlp_only_layers[i], m.n_layer));
  r.check("num_experts", !m.sparse_layers().empty(),
          "no layer is sparse: mlp_only_layers and decoder_sparse_step leave every layer dense");
}

ModelConfig read_model(const MapReader& top) {
  ModelConfig m;
  MapReader r = model_section().read(top, m);
  if (m.attention_head_dim == 0 && m.n_embd % m.n_head != 0)
    r.fail("n_embd", fmt::format("{} is not divisible by model.n_head = {} (each head gets "
                                 "n_embd / n_head channels)",
                                 m.n_embd, m.n_head));
  if (m.arch == ModelArch::kLlama) {
    if (!r.has("n_kv_head")) m.n_kv_head = m.n_head;
    if (!r.has("intermediate_size")) m.intermediate_size = 4 * m.n_embd;
    if (!r.has("tie_embeddings")) m.tie_embeddings = false;
    if (!r.has("bias")) m.bias = false;
    r.check("bias", !m.bias, "expected false: llama has no biases");
    r.check("n_kv_head", m.n_kv_head <= m.n_head && m.n_head % m.n_kv_head == 0,
            fmt::format("expected a divisor of model.n_head = {} (each key/value head serves n_head / n_kv_head "
                        "query heads)",
                        m.n_head));
    check_moe(r, m);
  } else {
    for (const char* key : {"n_kv_head", "intermediate_size", "rms_norm_eps", "rope_theta", "rope_scaling",
                            "tie_embeddings", "qk_norm", "moe", "head_dim"})
      if (r.has(key))
        r.fail(key, fmt::format("is a llama key (model.arch: llama); model.arch is {}", name_of(m.arch)));
  }
  return m;
}

DataConfig read_data(const MapReader& top, const ModelConfig& model) {
  DataConfig d;
  MapReader r = data_section().read(top, d);
  if (!d.sources.empty() && !d.train.empty())
    r.fail("sources", "give data.train or data.sources, not both (a single corpus is data.train; a blend is "
                      "data.sources)");
  r.check("window_stride", d.window_stride <= model.block_size,
          fmt::format("{} is above model.block_size = {}: windows would skip tokens (0 means block_size)",
                      d.window_stride, model.block_size));
  r.check("eot_token", d.eot_token < model.vocab_size,
          fmt::format("{} is not a token id: model.vocab_size = {}", d.eot_token, model.vocab_size));
  return d;
}

// The schedule's steps must fit the run: wsd's warmup and decay within train.steps, linear's
// decay ending after its warmup and by the end; decay_shape only where it shapes something.
// (cosine keeps its old rules: any decay_steps.)
TrainConfig read_train(const MapReader& top) {
  TrainConfig t;
  MapReader r = train_section().read(top, t);
  const std::string schedule = name_of(t.lr_schedule);
  if (r.has("decay_shape") && t.lr_schedule != LrSchedule::kWsd)
    r.fail("decay_shape", fmt::format("shapes the decay of train.lr_schedule: wsd only, but the schedule is {}",
                                      schedule));
  if (t.lr_schedule == LrSchedule::kWsd && t.warmup_steps + t.decay_steps > t.steps)
    r.fail("decay_steps",
           fmt::format("{} decay steps after train.warmup_steps = {} do not fit in train.steps = {} (for "
                       "lr_schedule wsd, decay_steps is the length of the decay that ends the run)",
                       t.decay_steps, t.warmup_steps, t.steps));
  if (t.lr_schedule == LrSchedule::kLinear) {
    r.check("decay_steps", t.decay_steps <= t.steps,
            fmt::format("expected at most train.steps = {} (for lr_schedule linear, the step at which the "
                        "decay reaches min_lr)", t.steps));
    r.check("decay_steps", t.decay_steps >= t.warmup_steps,
            fmt::format("expected at least train.warmup_steps = {} (the decay starts after the warmup)",
                        t.warmup_steps));
  }
  if (t.lr_schedule != LrSchedule::kCosine)
    r.check("min_lr", t.min_lr <= t.lr, fmt::format("expected at most train.lr = {}", format_double(t.lr)));
  return t;
}

// Refuses sizes whose fp32 training state exceeds kMaxRunBytes, before anything multiplies them in
// int64. Upper bounds, in long double (which cannot overflow here): P = parameters (biases
// included, vocab padded for the mesh), S = activation floats saved per sequence (the model of
// inspect/memory_estimate.cpp); the estimate is at most 4 bytes * (P for each of parameters,
// gradients, AdamW m and v, gathered FSDP copies + batch_size * S).
void check_run_size(const MapReader& top, const Config& c) {
  using Real = long double;
  Real devices = 1;
  for (int64_t s : c.mesh.shape) devices *= static_cast<Real>(s);
  const ModelConfig& m = c.model;
  // The layout pads the vocabulary to a multiple of 64 ids per shard (parallel/layout.h).
  const Real V = static_cast<Real>(m.vocab_size) + 64 * devices, C = static_cast<Real>(m.n_embd),
             T = static_cast<Real>(m.block_size), L = static_cast<Real>(m.n_layer),
             H = static_cast<Real>(m.n_head), B = static_cast<Real>(c.data.batch_size);
  // llama's MLP (3 C x intermediate_size matrices) on top of the GPT-2 bound.
  const Real F = m.arch == ModelArch::kLlama ? static_cast<Real>(m.mlp_size()) : 0;
  const Real params = (2 * V + T + 2) * C + L * (12 * C * C + 13 * C + 3 * C * F);
  const Real per_sequence = T * (L * (18 * C + 4 * F + 2 * H * T) + 2 * C + 2 * V);
  auto bytes = [&](Real batch) { return 4 * (5 * params + batch * per_sequence); };
  if (bytes(B) <= static_cast<Real>(kMaxRunBytes)) return;
  const std::string message = fmt::format(
      "training this model needs about {:.3g} bytes of fp32 state (parameters, gradients, AdamW "
      "state and the activations of data.batch_size = {} sequences), more than the 2^60 bytes "
      "(1 EiB) a run may have; check the model sizes and data.batch_size",
      static_cast<double>(bytes(B)), c.data.batch_size);
  if (bytes(1) <= static_cast<Real>(kMaxRunBytes))  // the batch alone makes it too big
    data_section().reader(top).fail("batch_size", message);
  top.fail("model", message);
}

Config build_config(const YamlDoc& doc) {
  MapReader top(doc, doc.root(), "",
                {"mesh", "sharding_rules", "model", "data", "train", "eval", "checkpoint", "output",
                 "runtime"},
                doc.root().Mark());
  Config c;
  c.mesh = read_mesh(top);
  c.sharding_rules = read_sharding_rules(top, c.mesh);
  c.model = read_model(top);
  c.data = read_data(top, c.model);
  c.train = read_train(top);
  c.eval = read_eval(top);
  checkpoint_section().read(top, c.checkpoint);
  output_section().read(top, c.output);
  runtime_section().read(top, c.runtime);
  check_run_size(top, c);
  return c;
}

}  // namespace

bool MuonConfig::operator==(const MuonConfig& o) const {
  return lr == o.lr && weight_decay == o.weight_decay && momentum == o.momentum && nesterov == o.nesterov &&
         ns_steps == o.ns_steps && ns_coefficients == o.ns_coefficients && eps == o.eps &&
         adjust_lr_fn == o.adjust_lr_fn && ns_dtype == o.ns_dtype;
}

bool MoeConfig::operator==(const MoeConfig& o) const {
  return num_experts == o.num_experts && num_experts_per_tok == o.num_experts_per_tok &&
         moe_intermediate_size == o.moe_intermediate_size && norm_topk_prob == o.norm_topk_prob &&
         router_aux_loss_coef == o.router_aux_loss_coef && mlp_only_layers == o.mlp_only_layers &&
         decoder_sparse_step == o.decoder_sparse_step &&
         shared_expert_intermediate_size == o.shared_expert_intermediate_size &&
         expert_bias_update_rate == o.expert_bias_update_rate;
}

bool MoeConfig::sparse_layer(int64_t layer) const {
  if (!enabled() || (layer + 1) % decoder_sparse_step != 0) return false;
  return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end();
}

std::vector<int64_t> ModelConfig::sparse_layers() const {
  std::vector<int64_t> layers;
  for (int64_t l = 0; l < n_layer; ++l)
    if (moe.sparse_layer(l)) layers.push_back(l);
  return layers;
}

std::string to_yaml(const Config& c) {
  YAML::Emitter out;
  out.SetNullFormat(YAML::LowerNull);
  out << YAML::BeginMap;

  out << YAML::Key << "mesh" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "shape" << YAML::Value << YAML::Flow << c.mesh.shape;
  out << YAML::Key << "axes" << YAML::Value << YAML::Flow << c.mesh.axes;
  out << YAML::EndMap;

  out << YAML::Key << "sharding_rules" << YAML::Value;
  out << (c.sharding_rules.empty() ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
  for (const auto& rule : c.sharding_rules) {
    out << YAML::Flow << YAML::BeginSeq << rule.logical;
    if (rule.mesh_axes.empty()) {
      out << YAML::Null;
    } else if (rule.mesh_axes.size() == 1) {
      out << rule.mesh_axes[0];
    } else {
      out << YAML::Flow << rule.mesh_axes;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndSeq;

  model_section().emit(out, c.model);
  data_section().emit(out, c.data);
  train_section().emit(out, c.train);
  emit_eval(out, c.eval);
  checkpoint_section().emit(out, c.checkpoint);
  output_section().emit(out, c.output);
  runtime_section().emit(out, c.runtime);

  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

Config parse_config(const std::string& yaml_text, const std::string& name,
                    const std::vector<std::string>& overrides) {
  Config c;
  try {
    YamlDoc doc(yaml_text, name);
    for (const auto& spec : overrides) doc.apply_override(spec);
    c = build_config(doc);
  } catch (const YAML::Exception& e) {
    // The reader checks node types before converting, so this is a backstop, not a path.
    throw UsageError(fmt::format("{}: {}", name, e.what()));
  }
  c.source_path = name;
  c.resolved_yaml = to_yaml(c);
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UsageError(fmt::format("{}: cannot read config file: is a directory", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("{}: cannot read config file: {}", path, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UsageError(fmt::format("{}: cannot read config file", path));
  return parse_config(text.str(), path, overrides);
}

}  // namespace spmd
