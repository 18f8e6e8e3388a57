// Config loading: YAML file + `--set` overrides -> typed, validated Config (see config.h).
// Parsing and error locations live in yaml_reader; this file is the schema and its rules.
#include "config/config.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

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

const std::vector<std::string> kDataKeys = {"train", "val", "batch_size", "window_stride"};

// ------------------------------------------------------------------------------ field rules

void read_positive(const MapReader& r, const std::string& key, int64_t& out) {
  r.read(key, out);
  r.check(key, out > 0, "expected a positive integer");
}

void read_at_least(const MapReader& r, const std::string& key, int64_t& out, int64_t min) {
  r.read(key, out);
  r.check(key, out >= min,
          min == 0 ? "expected a non-negative integer" : fmt::format("expected an integer >= {}", min));
}

void read_non_negative(const MapReader& r, const std::string& key, double& out) {
  r.read(key, out);
  r.check(key, out >= 0, "expected a non-negative number");
}

void read_fraction(const MapReader& r, const std::string& key, double& out) {
  r.read(key, out);
  r.check(key, out >= 0 && out < 1, "expected a number in [0, 1)");
}

void read_choice(const MapReader& r, const std::string& key, std::string& out,
                 const std::vector<std::string>& choices) {
  r.read(key, out);
  r.check(key, std::find(choices.begin(), choices.end(), out) != choices.end(),
          fmt::format("expected one of {}", fmt::join(choices, ", ")));
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

ModelConfig read_model(const MapReader& top) {
  ModelConfig m;
  MapReader r = top.section(
      "model", {"vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "bias", "matmul_dtype"});
  read_positive(r, "vocab_size", m.vocab_size);
  read_positive(r, "block_size", m.block_size);
  read_positive(r, "n_layer", m.n_layer);
  r.check("n_layer", m.n_layer <= kMaxLayers,
          fmt::format("expected at most {} layers", kMaxLayers));
  read_positive(r, "n_head", m.n_head);
  read_positive(r, "n_embd", m.n_embd);
  read_fraction(r, "dropout", m.dropout);
  r.read("bias", m.bias);
  read_choice(r, "matmul_dtype", m.matmul_dtype, {"float32", "bfloat16"});
  if (m.n_embd % m.n_head != 0)
    r.fail("n_embd", fmt::format("{} is not divisible by model.n_head = {} (each head gets "
                                 "n_embd / n_head channels)",
                                 m.n_embd, m.n_head));
  return m;
}

DataConfig read_data(const MapReader& top, const ModelConfig& model) {
  DataConfig d;
  MapReader r = top.section("data", kDataKeys);
  r.read("train", d.train);  // existence is the data loader's business
  r.read("val", d.val);
  read_positive(r, "batch_size", d.batch_size);
  read_at_least(r, "window_stride", d.window_stride, 0);
  r.check("window_stride", d.window_stride <= model.block_size,
          fmt::format("{} is above model.block_size = {}: windows would skip tokens (0 means block_size)",
                      d.window_stride, model.block_size));
  return d;
}

TrainConfig read_train(const MapReader& top) {
  TrainConfig t;
  MapReader r = top.section(
      "train", {"steps", "decay_steps", "seed", "lr", "min_lr", "warmup_steps", "weight_decay",
                "beta1", "beta2", "grad_clip", "eval_every", "eval_batches", "log_every",
                "skip_nonfinite", "microbatches", "sample_every", "init_from"});
  read_positive(r, "steps", t.steps);
  read_at_least(r, "decay_steps", t.decay_steps, 0);
  r.read("seed", t.seed);
  r.read("lr", t.lr);
  r.check("lr", t.lr > 0, "expected a positive number");
  read_non_negative(r, "min_lr", t.min_lr);
  read_at_least(r, "warmup_steps", t.warmup_steps, 0);
  read_non_negative(r, "weight_decay", t.weight_decay);
  read_fraction(r, "beta1", t.beta1);
  read_fraction(r, "beta2", t.beta2);
  read_non_negative(r, "grad_clip", t.grad_clip);
  read_at_least(r, "eval_every", t.eval_every, 0);
  read_positive(r, "eval_batches", t.eval_batches);
  read_positive(r, "log_every", t.log_every);
  r.read("skip_nonfinite", t.skip_nonfinite);
  // Divisibility by data-parallel degree x microbatches needs the mesh layout: plan_layout checks it.
  read_at_least(r, "microbatches", t.microbatches, 1);
  read_at_least(r, "sample_every", t.sample_every, 0);
  r.read("init_from", t.init_from);  // checked against model.* by check_hf_checkpoint (needs the file)
  return t;
}

CheckpointConfig read_checkpoint(const MapReader& top) {
  CheckpointConfig c;
  MapReader r = top.section("checkpoint", {"dir", "every", "keep", "async"});
  r.read("dir", c.dir);
  read_at_least(r, "every", c.every, 0);
  read_at_least(r, "keep", c.keep, 1);
  r.read("async", c.async);
  return c;
}

OutputConfig read_output(const MapReader& top) {
  OutputConfig o;
  MapReader r = top.section("output", {"dir"});
  r.read("dir", o.dir);
  return o;
}

RuntimeConfig read_runtime(const MapReader& top) {
  RuntimeConfig rt;
  MapReader r = top.section("runtime", {"backend", "device", "threads_per_rank", "timeout_s", "grad_bucket_mb",
                                           "fsdp_prefetch", "pipeline_schedule", "virtual_stages", "pipeline_layers",
                                           "remat"});
  read_choice(r, "backend", rt.backend, {"gloo", "nccl", "auto"});
  read_choice(r, "device", rt.device, {"cpu", "cuda", "auto"});
  if (r.has("threads_per_rank")) {
    const YAML::Node v = r.get("threads_per_rank");
    std::optional<int64_t> n;
    if (v.IsScalar()) n = v.Scalar() == "auto" ? std::optional<int64_t>(0) : parse_int(v.Scalar());
    r.check("threads_per_rank", n && *n >= 0, "expected 'auto' or a non-negative integer");
    rt.threads_per_rank = *n;
  }
  r.read("timeout_s", rt.timeout_s);
  r.check("timeout_s", rt.timeout_s > 0, "expected a positive number of seconds");
  read_non_negative(r, "grad_bucket_mb", rt.grad_bucket_mb);
  r.check("grad_bucket_mb", rt.grad_bucket_mb <= 1048576, "expected at most 1048576 (1 TiB)");
  r.read("fsdp_prefetch", rt.fsdp_prefetch);
  read_choice(r, "pipeline_schedule", rt.pipeline_schedule, {"1f1b", "gpipe", "interleaved"});
  read_at_least(r, "virtual_stages", rt.virtual_stages, 1);
  read_choice(r, "remat", rt.remat, {"none", "full", "selective"});
  r.read("pipeline_layers", rt.pipeline_layers);
  for (int64_t n : rt.pipeline_layers)
    r.check("pipeline_layers", n > 0, "expected a list of positive block counts, one per pipeline stage");
  return rt;
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
  const Real V = static_cast<Real>(m.vocab_size) + devices, C = static_cast<Real>(m.n_embd),
             T = static_cast<Real>(m.block_size), L = static_cast<Real>(m.n_layer),
             H = static_cast<Real>(m.n_head), B = static_cast<Real>(c.data.batch_size);
  const Real params = (V + T + 2) * C + L * (12 * C * C + 13 * C);
  const Real per_sequence = T * (L * (18 * C + 2 * H * T) + 2 * C + 2 * V);
  auto bytes = [&](Real batch) { return 4 * (5 * params + batch * per_sequence); };
  if (bytes(B) <= static_cast<Real>(kMaxRunBytes)) return;
  const std::string message = fmt::format(
      "training this model needs about {:.3g} bytes of fp32 state (parameters, gradients, AdamW "
      "state and the activations of data.batch_size = {} sequences), more than the 2^60 bytes "
      "(1 EiB) a run may have; check the model sizes and data.batch_size",
      static_cast<double>(bytes(B)), c.data.batch_size);
  if (bytes(1) <= static_cast<Real>(kMaxRunBytes))  // the batch alone makes it too big
    top.section("data", kDataKeys).fail("batch_size", message);
  top.fail("model", message);
}

Config build_config(const YamlDoc& doc) {
  MapReader top(doc, doc.root(), "",
                {"mesh", "sharding_rules", "model", "data", "train", "checkpoint", "output",
                 "runtime"},
                doc.root().Mark());
  Config c;
  c.mesh = read_mesh(top);
  c.sharding_rules = read_sharding_rules(top, c.mesh);
  c.model = read_model(top);
  c.data = read_data(top, c.model);
  c.train = read_train(top);
  c.checkpoint = read_checkpoint(top);
  c.output = read_output(top);
  c.runtime = read_runtime(top);
  check_run_size(top, c);
  return c;
}

// ---------------------------------------------------------------------------------- emitting

// Shortest text that reads back as the same double, with a ".0" so it still looks like a float.
std::string format_double(double x) {
  std::string s = fmt::format("{}", x);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

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

  auto section = [&](const char* name) {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
  };
  auto field = [&](const char* name, const auto& value) {
    out << YAML::Key << name << YAML::Value << value;
  };
  auto number = [&](const char* name, double value) { field(name, format_double(value)); };

  section("model");
  field("vocab_size", c.model.vocab_size);
  field("block_size", c.model.block_size);
  field("n_layer", c.model.n_layer);
  field("n_head", c.model.n_head);
  field("n_embd", c.model.n_embd);
  number("dropout", c.model.dropout);
  field("bias", c.model.bias);
  field("matmul_dtype", c.model.matmul_dtype);
  out << YAML::EndMap;

  section("data");
  field("train", c.data.train);
  field("val", c.data.val);
  field("batch_size", c.data.batch_size);
  field("window_stride", c.data.window_stride);
  out << YAML::EndMap;

  section("train");
  field("steps", c.train.steps);
  field("decay_steps", c.train.decay_steps);
  field("seed", c.train.seed);
  number("lr", c.train.lr);
  number("min_lr", c.train.min_lr);
  field("warmup_steps", c.train.warmup_steps);
  number("weight_decay", c.train.weight_decay);
  number("beta1", c.train.beta1);
  number("beta2", c.train.beta2);
  number("grad_clip", c.train.grad_clip);
  field("eval_every", c.train.eval_every);
  field("eval_batches", c.train.eval_batches);
  field("log_every", c.train.log_every);
  field("skip_nonfinite", c.train.skip_nonfinite);
  field("microbatches", c.train.microbatches);
  field("sample_every", c.train.sample_every);
  field("init_from", c.train.init_from);
  out << YAML::EndMap;

  section("checkpoint");
  field("dir", c.checkpoint.dir);
  field("every", c.checkpoint.every);
  field("keep", c.checkpoint.keep);
  field("async", c.checkpoint.async);
  out << YAML::EndMap;

  section("output");
  field("dir", c.output.dir);
  out << YAML::EndMap;

  section("runtime");
  field("backend", c.runtime.backend);
  field("device", c.runtime.device);
  if (c.runtime.threads_per_rank == 0) {
    field("threads_per_rank", std::string("auto"));
  } else {
    field("threads_per_rank", c.runtime.threads_per_rank);
  }
  number("timeout_s", c.runtime.timeout_s);
  number("grad_bucket_mb", c.runtime.grad_bucket_mb);
  field("fsdp_prefetch", c.runtime.fsdp_prefetch);
  field("pipeline_schedule", c.runtime.pipeline_schedule);
  if (c.runtime.virtual_stages != 1) field("virtual_stages", c.runtime.virtual_stages);
  field("remat", c.runtime.remat);
  if (!c.runtime.pipeline_layers.empty()) field("pipeline_layers", c.runtime.pipeline_layers);
  out << YAML::EndMap;

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
