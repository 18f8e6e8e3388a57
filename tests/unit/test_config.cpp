// Unit tests for config loading: the schema, defaults, every validation rule and its error
// location (name:line:col or --set), unknown-key suggestions, overrides and resolved_yaml.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "config/config.h"
#include "inspect/memory_estimate.h"
#include "parallel/layout.h"
#include "test_support.h"
#include "util/error.h"

using spmd::Config;
using spmd::parse_config;
using spmd::test::contains;

namespace {

// The example from the config documentation; line numbers below refer to this text.
const char* kExample = R"(mesh: {shape: [4, 2], axes: [data, model]}
sharding_rules:            # ordered (logical name, mesh axis | null | [axes]) pairs, as in Flax
  - [batch, data]
  - [vocab, model]
  - [heads, model]
  - [mlp, model]
  - [embed, null]
  - [seq, null]
  - [kv, null]
model: {vocab_size: 65, block_size: 64, n_layer: 4, n_head: 4, n_embd: 128, dropout: 0.0, bias: true}
data: {train: /data/train.bin, val: /data/val.bin, batch_size: 12}
train: {steps: 2000, decay_steps: 2000, seed: 1337, lr: 1.0e-3, min_lr: 1.0e-4, warmup_steps: 100,
        weight_decay: 0.1, beta1: 0.9, beta2: 0.99, grad_clip: 1.0, eval_every: 250,
        eval_batches: 20, log_every: 10, skip_nonfinite: false}
checkpoint: {dir: /ckpt, every: 500, keep: 3}
output: {dir: /out}
runtime: {backend: gloo, device: cpu, threads_per_rank: auto, timeout_s: 300}
)";

// The UsageError message `fn` throws, or a marker that makes the CHECKs fail readably.
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const spmd::UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a UsageError: ") + e.what() + ">";
  }
  return "<no error>";
}

std::string parse_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { parse_config(text, "t.yaml", overrides); });
}

// Asserts that `text` fails with a message holding `location` and then `detail` (key + reason).
void check_error(const std::string& text, const std::string& location, const std::string& detail,
                 const std::vector<std::string>& overrides = {}) {
  const std::string message = parse_error(text, overrides);
  CAPTURE(text);
  CAPTURE(message);
  CHECK(contains(message, location + ": " + detail));
}

void check_same(const Config& a, const Config& b) {
  CHECK(a.mesh.shape == b.mesh.shape);
  CHECK(a.mesh.axes == b.mesh.axes);
  REQUIRE(a.sharding_rules.size() == b.sharding_rules.size());
  for (size_t i = 0; i < a.sharding_rules.size(); ++i) {
    CHECK(a.sharding_rules[i].logical == b.sharding_rules[i].logical);
    CHECK(a.sharding_rules[i].mesh_axes == b.sharding_rules[i].mesh_axes);
  }
  CHECK(a.model.vocab_size == b.model.vocab_size);
  CHECK(a.model.block_size == b.model.block_size);
  CHECK(a.model.n_layer == b.model.n_layer);
  CHECK(a.model.n_head == b.model.n_head);
  CHECK(a.model.n_embd == b.model.n_embd);
  CHECK(a.model.dropout == b.model.dropout);  // exact: the emitter must round-trip doubles
  CHECK(a.model.bias == b.model.bias);
  CHECK(a.data.train == b.data.train);
  CHECK(a.data.val == b.data.val);
  CHECK(a.data.batch_size == b.data.batch_size);
  CHECK(a.train.steps == b.train.steps);
  CHECK(a.train.decay_steps == b.train.decay_steps);
  CHECK(a.train.seed == b.train.seed);
  CHECK(a.train.lr == b.train.lr);
  CHECK(a.train.min_lr == b.train.min_lr);
  CHECK(a.train.warmup_steps == b.train.warmup_steps);
  CHECK(a.train.weight_decay == b.train.weight_decay);
  CHECK(a.train.beta1 == b.train.beta1);
  CHECK(a.train.beta2 == b.train.beta2);
  CHECK(a.train.grad_clip == b.train.grad_clip);
  CHECK(a.train.eval_every == b.train.eval_every);
  CHECK(a.train.eval_batches == b.train.eval_batches);
  CHECK(a.train.log_every == b.train.log_every);
  CHECK(a.train.skip_nonfinite == b.train.skip_nonfinite);
  CHECK(a.train.microbatches == b.train.microbatches);
  CHECK(a.checkpoint.dir == b.checkpoint.dir);
  CHECK(a.checkpoint.every == b.checkpoint.every);
  CHECK(a.checkpoint.keep == b.checkpoint.keep);
  CHECK(a.checkpoint.async == b.checkpoint.async);
  CHECK(a.output.dir == b.output.dir);
  CHECK(a.runtime.backend == b.runtime.backend);
  CHECK(a.runtime.device == b.runtime.device);
  CHECK(a.runtime.threads_per_rank == b.runtime.threads_per_rank);
  CHECK(a.runtime.timeout_s == b.runtime.timeout_s);
  CHECK(a.runtime.tf32 == b.runtime.tf32);
}

}  // namespace

TEST_CASE("config: parses the documented example") {
  Config c = parse_config(kExample, "example.yaml");
  CHECK(c.source_path == "example.yaml");
  CHECK(c.mesh.shape == std::vector<int64_t>{4, 2});
  CHECK(c.mesh.axes == std::vector<std::string>{"data", "model"});
  REQUIRE(c.sharding_rules.size() == 7);
  CHECK(c.sharding_rules[0].logical == "batch");
  CHECK(c.sharding_rules[0].mesh_axes == std::vector<std::string>{"data"});
  CHECK(c.sharding_rules[1].logical == "vocab");
  CHECK(c.sharding_rules[1].mesh_axes == std::vector<std::string>{"model"});
  CHECK(c.sharding_rules[4].logical == "embed");
  CHECK(c.sharding_rules[4].mesh_axes.empty());
  CHECK(c.sharding_rules[6].logical == "kv");
  CHECK(c.model.vocab_size == 65);
  CHECK(c.model.block_size == 64);
  CHECK(c.model.n_layer == 4);
  CHECK(c.model.n_head == 4);
  CHECK(c.model.n_embd == 128);
  CHECK(c.model.dropout == 0.0);
  CHECK(c.model.bias);
  CHECK(c.data.train == "/data/train.bin");
  CHECK(c.data.val == "/data/val.bin");
  CHECK(c.data.batch_size == 12);
  CHECK(c.train.steps == 2000);
  CHECK(c.train.decay_steps == 2000);
  CHECK(c.train.seed == 1337);
  CHECK(c.train.lr == 1.0e-3);
  CHECK(c.train.min_lr == 1.0e-4);
  CHECK(c.train.warmup_steps == 100);
  CHECK(c.train.weight_decay == 0.1);
  CHECK(c.train.beta1 == 0.9);
  CHECK(c.train.beta2 == 0.99);
  CHECK(c.train.grad_clip == 1.0);
  CHECK(c.train.eval_every == 250);
  CHECK(c.train.eval_batches == 20);
  CHECK(c.train.log_every == 10);
  CHECK_FALSE(c.train.skip_nonfinite);
  CHECK(c.checkpoint.dir == "/ckpt");
  CHECK(c.checkpoint.every == 500);
  CHECK(c.checkpoint.keep == 3);
  CHECK(c.checkpoint.async);  // the default
  CHECK(c.output.dir == "/out");
  CHECK(c.runtime.backend == "gloo");
  CHECK(c.runtime.device == "cpu");
  CHECK(c.runtime.threads_per_rank == 0);
  CHECK(c.runtime.timeout_s == 300);
}

TEST_CASE("config: block style, multi-axis rules and explicit values") {
  Config c = parse_config(R"(
mesh:
  shape: [2, 2, 2]
  axes: [data, fsdp, model]
sharding_rules:
  - [batch, [data, fsdp]]
  - [embed, []]
  - [mlp, model]
runtime:
  threads_per_rank: 3
  backend: nccl
  device: cuda
  timeout_s: 12.5
model:
  bias: no
  dropout: 0.25
data:
  train: ~
)",
                          "t.yaml");
  REQUIRE(c.sharding_rules.size() == 3);
  CHECK(c.sharding_rules[0].mesh_axes == std::vector<std::string>{"data", "fsdp"});
  CHECK(c.sharding_rules[1].mesh_axes.empty());
  CHECK(c.runtime.threads_per_rank == 3);
  CHECK(c.runtime.backend == "nccl");
  CHECK(c.runtime.device == "cuda");
  CHECK(c.runtime.timeout_s == 12.5);
  CHECK_FALSE(c.model.bias);
  CHECK(c.model.dropout == 0.25);
  CHECK(c.data.train.empty());
}

TEST_CASE("config: missing keys keep the defaults") {
  const Config defaults;
  for (const char* text : {"", "{}", "# only a comment\n", "model:\ncheckpoint: {}\n"}) {
    CAPTURE(text);
    Config c = parse_config(text, "t.yaml");
    check_same(c, defaults);
    CHECK(c.sharding_rules.empty());
  }
  // A partly given section keeps the other fields of that section.
  Config c = parse_config("model: {n_layer: 12}\ntrain: {lr: 3.0e-4}\n", "t.yaml");
  CHECK(c.model.n_layer == 12);
  CHECK(c.model.n_head == defaults.model.n_head);
  CHECK(c.model.n_embd == defaults.model.n_embd);
  CHECK(c.train.lr == 3.0e-4);
  CHECK(c.train.steps == defaults.train.steps);
  CHECK(c.output.dir == "out");
  CHECK(c.mesh.shape == std::vector<int64_t>{1});
  CHECK(c.mesh.axes == std::vector<std::string>{"data"});
}

TEST_CASE("config: type errors name the key and where its value is") {
  // "  n_layer: " is 11 characters, so the value starts at column 12 of line 2.
  check_error("model:\n  n_layer: -3\n", "t.yaml:2:12",
              "model.n_layer: expected a positive integer, got \"-3\"");
  check_error("model:\n  n_layer: 4.5\n", "t.yaml:2:12",
              "model.n_layer: expected an integer, got \"4.5\"");
  check_error("model:\n  n_layer: four\n", "t.yaml:2:12",
              "model.n_layer: expected an integer, got \"four\"");
  check_error("model:\n  n_layer: [4]\n", "t.yaml:2:12",
              "model.n_layer: expected an integer, got a list");
  check_error("model:\n  n_layer:\n", "t.yaml:2:3", "model.n_layer: expected an integer, got null");
  check_error("model: {bias: maybe}\n", "t.yaml:1:15", "model.bias: expected true or false");
  check_error("train:\n  lr: fast\n", "t.yaml:2:7", "train.lr: expected a number, got \"fast\"");
  check_error("train:\n  lr: .inf\n", "t.yaml:2:7", "train.lr: expected a number");
  check_error("data:\n  train: [a, b]\n", "t.yaml:2:10", "data.train: expected a string, got a list");
  check_error("mesh:\n  shape: 4\n", "t.yaml:2:10", "mesh.shape: expected a list of integers");
  check_error("mesh:\n  shape: [4, x]\n  axes: [a, b]\n", "t.yaml:2:14",
              "mesh.shape[1]: expected an integer, got \"x\"");
  check_error("model: 3\n", "t.yaml:1:8", "model: expected a map with keys vocab_size");
  check_error("- a\n- b\n", "t.yaml:1:1", "expected a map of sections");
}

TEST_CASE("config: value range errors") {
  struct Case {
    const char* section;
    const char* field;  // "key: value"
    const char* detail;
  };
  const Case cases[] = {
      {"model", "vocab_size: 0", "model.vocab_size: expected a positive integer, got \"0\""},
      {"model", "block_size: -1", "model.block_size: expected a positive integer"},
      {"model", "n_layer: 0", "model.n_layer: expected a positive integer"},
      {"model", "n_head: 0", "model.n_head: expected a positive integer"},
      {"model", "n_embd: -128", "model.n_embd: expected a positive integer"},
      {"model", "dropout: 1.0", "model.dropout: expected a number in [0, 1), got \"1.0\""},
      {"model", "dropout: -0.1", "model.dropout: expected a number in [0, 1)"},
      {"data", "batch_size: 0", "data.batch_size: expected a positive integer"},
      {"data", "window_stride: -1", "data.window_stride: expected a non-negative integer"},
      {"data", "window_stride: 65", "data.window_stride: 65 is above model.block_size = 64"},
      {"data", "eot_token: -2", "data.eot_token: expected an integer >= -1"},
      {"data", "eot_token: 113", "data.eot_token: 113 is not a token id: model.vocab_size = 65"},
      {"data", "document_mask: maybe", "data.document_mask: expected true or false"},
      {"train", "steps: 0", "train.steps: expected a positive integer"},
      {"train", "eval_batches: 0", "train.eval_batches: expected a positive integer"},
      {"train", "log_every: 0", "train.log_every: expected a positive integer"},
      {"train", "warmup_steps: -1", "train.warmup_steps: expected a non-negative integer"},
      {"train", "eval_every: -5", "train.eval_every: expected a non-negative integer"},
      {"train", "lr: 0", "train.lr: expected a positive number"},
      {"train", "lr: -1e-3", "train.lr: expected a positive number"},
      {"train", "min_lr: -1.0e-5", "train.min_lr: expected a non-negative number"},
      {"train", "beta1: 1.0", "train.beta1: expected a number in [0, 1)"},
      {"train", "beta2: -0.5", "train.beta2: expected a number in [0, 1)"},
      {"train", "microbatches: 0", "train.microbatches: expected an integer >= 1, got \"0\""},
      {"train", "microbatches: -2", "train.microbatches: expected an integer >= 1"},
      {"checkpoint", "every: -1", "checkpoint.every: expected a non-negative integer"},
      {"checkpoint", "keep: 0", "checkpoint.keep: expected an integer >= 1"},
      {"checkpoint", "async: maybe", "checkpoint.async: expected true or false"},
      {"runtime", "backend: mpi", "runtime.backend: expected one of gloo, nccl, auto, got \"mpi\""},
      {"runtime", "device: tpu", "runtime.device: expected one of cpu, cuda, auto, got \"tpu\""},
      {"runtime", "timeout_s: 0", "runtime.timeout_s: expected a positive number"},
      {"runtime", "grad_bucket_mb: -1", "runtime.grad_bucket_mb: expected a non-negative number"},
      {"runtime", "threads_per_rank: -2", "runtime.threads_per_rank: expected 'auto' or a non-negative"},
      {"runtime", "threads_per_rank: autoo", "runtime.threads_per_rank: expected 'auto'"},
  };
  for (const Case& c : cases) {
    // Line 3, after a comment line, in block style: the value starts after "  key: ".
    const std::string field = c.field;
    const std::string text = std::string("# test\n") + c.section + ":\n  " + field + "\n";
    const size_t column = 2 + field.find(": ") + 2 + 1;
    check_error(text, "t.yaml:3:" + std::to_string(column), c.detail);
  }
  // Zero is allowed where the rule says >= 0.
  Config ok = parse_config("train: {warmup_steps: 0, eval_every: 0, min_lr: 0, beta1: 0}\n"
                           "checkpoint: {every: 0, keep: 1}\nruntime: {threads_per_rank: 0}\n",
                           "t.yaml");
  CHECK(ok.train.eval_every == 0);
  CHECK(ok.checkpoint.keep == 1);
}

TEST_CASE("config: learning-rate schedules: names, and steps that must fit the run") {
  Config c = parse_config("train: {steps: 100, warmup_steps: 10, decay_steps: 20, lr_schedule: wsd, decay_shape: 1-sqrt}\n",
                          "t.yaml");
  CHECK(c.train.lr_schedule == spmd::LrSchedule::kWsd);
  CHECK(c.train.decay_shape == spmd::DecayShape::kOneMinusSqrt);
  CHECK(parse_config("train: {}\n", "t.yaml").train.lr_schedule == spmd::LrSchedule::kCosine);  // today's, the default
  CHECK(contains(parse_config("train: {lr_schedule: wsd}\n", "t.yaml", {"train.decay_steps=10"}).resolved_yaml,
                 "decay_shape: linear"));
  CHECK(!contains(parse_config("train: {}\n", "t.yaml").resolved_yaml, "decay_shape"));

  check_error("train:\n  lr_schedule: step\n", "t.yaml:2:16",
              "train.lr_schedule: expected one of cosine, wsd, linear, constant, got \"step\"");
  check_error("train:\n  lr_schedule: wsd\n  decay_shape: exp\n", "t.yaml:3:16",
              "train.decay_shape: expected one of linear, cosine, 1-sqrt, got \"exp\"");
  // wsd: warmup + decay within the run; the message names decay_steps and where it was set.
  check_error("train: {steps: 100, warmup_steps: 10, lr_schedule: wsd, decay_steps: 91}\n", "t.yaml:1:70",
              "train.decay_steps: 91 decay steps after train.warmup_steps = 10 do not fit in train.steps = 100");
  CHECK(contains(parse_error("train: {steps: 100, lr_schedule: wsd}\n"), "train.decay_steps: 2000 decay steps"));
  CHECK(parse_config("train: {steps: 100, warmup_steps: 10, lr_schedule: wsd, decay_steps: 90}\n", "t.yaml")
            .train.decay_steps == 90);
  // linear: decay ends after the warmup and by the end of the run.
  CHECK(contains(parse_error("train: {steps: 100, warmup_steps: 10, lr_schedule: linear, decay_steps: 101}\n"),
                 "train.decay_steps: expected at most train.steps = 100"));
  CHECK(contains(parse_error("train: {steps: 100, warmup_steps: 10, lr_schedule: linear, decay_steps: 9}\n"),
                 "train.decay_steps: expected at least train.warmup_steps = 10"));
  CHECK(contains(parse_error("train: {lr_schedule: constant, min_lr: 1.0, lr: 0.5}\n"),
                 "train.min_lr: expected at most train.lr = 0.5"));
  // decay_shape shapes wsd's decay only; elsewhere it would be silently ignored.
  CHECK(contains(parse_error("train: {lr_schedule: linear, decay_shape: cosine}\n"),
                 "train.decay_shape: shapes the decay of train.lr_schedule: wsd only, but the schedule is linear"));
  CHECK(contains(parse_error("train: {decay_shape: cosine}\n"), "but the schedule is cosine"));
  // cosine keeps its old rules: decay_steps past the end is allowed.
  CHECK(parse_config("train: {steps: 10, decay_steps: 100}\n", "t.yaml").train.decay_steps == 100);
}

TEST_CASE("config: data.sources, a weighted blend in place of data.train") {
  const std::string blend = "data:\n  sources:\n    - {name: web, path: /d/web.bin, weight: 0.7, val: /d/web-val.bin}\n"
                            "    - {name: code, path: /d/code.bin, weight: 0.3}\n";
  Config c = parse_config(blend, "t.yaml");
  REQUIRE(c.data.sources.size() == 2);
  CHECK(c.data.sources[0].name == "web");
  CHECK(c.data.sources[0].val == "/d/web-val.bin");
  CHECK(c.data.sources[1].weight == 0.3);
  CHECK(c.data.sources[1].val.empty());
  CHECK(spmd::tokenizer_data_path(c.data) == "/d/web.bin");
  Config again = parse_config(c.resolved_yaml, "resolved.yaml");  // the resolved config keeps the blend
  CHECK(again.resolved_yaml == c.resolved_yaml);
  REQUIRE(again.data.sources.size() == 2);
  CHECK(again.data.sources[0].weight == 0.7);
  CHECK(parse_config(blend, "t.yaml", {"data.sources=null", "data.train=/d/x.bin"}).data.sources.empty());

  check_error(blend + "  train: /d/x.bin\n", "t.yaml:3:5", "data.sources: give data.train or data.sources, not both");
  check_error("data:\n  sources:\n    - {name: web, path: /d/web.bin, weight: -1}\n", "t.yaml:3:45",
              "data.sources[0].weight: expected a positive number, got \"-1\"");
  check_error("data:\n  sources:\n    - {name: a, path: /d/a.bin}\n    - {name: a, path: /d/b.bin}\n", "t.yaml:4:14",
              "data.sources[1].name: expected a name no other source has");
  CHECK(contains(parse_error("data: {sources: [{name: a, path: /d/a.bin, weigth: 2}]}\n"),
                 "data.sources[0].weigth: unknown key 'weigth' (did you mean 'weight'?)"));
  CHECK(contains(parse_error("data: {sources: [{name: a/b, path: /d/a.bin}]}\n"), "data.sources[0].name: expected a non-empty name"));
  CHECK(contains(parse_error("data: {sources: [{name: a}]}\n"), "data.sources[0].path: expected the source's prepared token data"));
  CHECK(contains(parse_error("data: {sources: []}\n"), "data.sources: expected a list of {name, path, weight} maps"));
}

TEST_CASE("config: n_embd must be divisible by n_head") {
  check_error("model:\n  n_head: 3\n  n_embd: 128\n", "t.yaml:3:11",
              "model.n_embd: 128 is not divisible by model.n_head = 3");
  // n_embd left at its default: the error points at the model section.
  check_error("model:\n  n_head: 3\n", "t.yaml:2:3", "model.n_embd: 128 is not divisible");
  CHECK_NOTHROW(parse_config("model: {n_head: 6, n_embd: 384}\n", "t.yaml"));
}

TEST_CASE("config: train.microbatches must split every data-parallel rank's rows evenly") {
  // kExample: batch 12 over the 4-way data axis, 3 rows per rank.
  CHECK(parse_config(kExample, "t.yaml").train.microbatches == 1);
  Config three = parse_config(kExample, "t.yaml", {"train.microbatches=3"});
  CHECK(three.train.microbatches == 3);
  CHECK_NOTHROW(spmd::plan_layout(three));
  // Known once the layout gives the data-parallel degree: a UsageError naming both keys and sizes.
  std::string message = error_of([] { spmd::plan_layout(parse_config(kExample, "t.yaml", {"train.microbatches=2"})); });
  CAPTURE(message);
  CHECK(contains(message, "data.batch_size = 12"));
  CHECK(contains(message, "train.microbatches = 2"));
  CHECK(contains(message, "a multiple of 4 (data-parallel degree) x 2 (microbatches)"));
  // No data axis: the whole batch is the rank's.
  const std::vector<std::string> one_rank{"mesh.shape=[1, 2]", "data.batch_size=6"};
  auto with = [&](const std::string& m) {
    auto o = one_rank;
    o.push_back("train.microbatches=" + m);
    return parse_config(kExample, "t.yaml", o);
  };
  CHECK_NOTHROW(spmd::plan_layout(with("6")));
  CHECK(contains(error_of([&] { spmd::plan_layout(with("4")); }), "a multiple of 1 (data-parallel degree) x 4"));
  // More microbatches than rows, up to int64's limit: an error, not an overflow.
  CHECK(contains(error_of([&] { spmd::plan_layout(with("9223372036854775807")); }),
                 "train.microbatches = 9223372036854775807"));

  // spmd-inspect's activation estimate holds one microbatch (3 of 3 rows -> 1): all of it scales
  // with the rows but the loss's gradient of the table (its shard here: vocab / 2 x n_embd fp32,
  // whatever the rows).
  const auto layout = spmd::plan_layout(three);
  const int64_t table_grad = layout.param("wte").sharding.shard_numel() * 4;
  CHECK((spmd::estimate_memory(layout, 12, 3).activations - table_grad) * 3 ==
        spmd::estimate_memory(layout, 12, 1).activations - table_grad);
  CHECK(spmd::estimate_memory(layout, 12, 3).params == spmd::estimate_memory(layout, 12, 1).params);
  const int64_t unpadded_grad = three.model.vocab_size * three.model.n_embd * 4;
  CHECK((spmd::estimate_unsharded_memory(three.model, 12, 3).activations - unpadded_grad) * 3 ==
        spmd::estimate_unsharded_memory(three.model, 12, 1).activations - unpadded_grad);
}

TEST_CASE("config: mesh validation") {
  check_error("mesh:\n  shape: [4, 0]\n  axes: [a, b]\n", "t.yaml:2:14",
              "mesh.shape[1]: expected an axis size >= 1, got \"0\"");
  check_error("mesh:\n  shape: []\n  axes: []\n", "t.yaml:2:10",
              "mesh.shape: expected at least one axis size");
  check_error("mesh:\n  shape: [4, 2]\n  axes: [data]\n", "t.yaml:3:9",
              "mesh.axes: has 1 name(s) [data] but mesh.shape has 2 size(s) [4, 2]");
  check_error("mesh:\n  shape: [4, 2]\n  axes: [data, data]\n", "t.yaml:3:16",
              "mesh.axes[1]: expected unique axis names");
  check_error("mesh:\n  shape: [4, 2]\n  axes: ['', model]\n", "t.yaml:3:10",
              "mesh.axes[0]: expected a non-empty axis name");
}

TEST_CASE("config: sharding rule validation") {
  const std::string mesh = "mesh: {shape: [4, 2], axes: [data, model]}\n";
  // Unknown mesh axis: names the rule's position, the bad axis and the mesh's axes.
  const std::string message =
      parse_error(mesh + "sharding_rules:\n  - [batch, data]\n  - [vocab, modle]\n");
  CAPTURE(message);
  CHECK(contains(message, "t.yaml:4:5: sharding_rules[1]: rule 'vocab' names mesh axis 'modle'"));
  CHECK(contains(message, "did you mean 'model'?"));
  CHECK(contains(message, "mesh axes: [data, model]"));

  check_error(mesh + "sharding_rules:\n  - [batch, [data, pipe]]\n", "t.yaml:3:5",
              "sharding_rules[0]: rule 'batch' names mesh axis 'pipe', which is not in the mesh");
  check_error(mesh + "sharding_rules:\n  - [batch, [data, data]]\n", "t.yaml:3:5",
              "sharding_rules[0]: rule 'batch' names mesh axis 'data' twice");
  check_error(mesh + "sharding_rules:\n  - [batch]\n", "t.yaml:3:5",
              "sharding_rules[0]: expected [logical_name, mesh_axes]");
  check_error(mesh + "sharding_rules:\n  - [batch, data, model]\n", "t.yaml:3:5",
              "sharding_rules[0]: expected [logical_name, mesh_axes]");
  check_error(mesh + "sharding_rules:\n  - {batch: data}\n", "t.yaml:3:5",
              "sharding_rules[0]: expected [logical_name, mesh_axes]");
  check_error(mesh + "sharding_rules:\n  - [[a], data]\n", "t.yaml:3:5",
              "sharding_rules[0]: expected a logical axis name first, got a list");
  check_error(mesh + "sharding_rules: {batch: data}\n", "t.yaml:2:17",
              "sharding_rules: expected a list of [logical_name, mesh_axes] pairs");
  // Rules are checked against the default mesh (one axis, "data") when mesh is absent.
  check_error("sharding_rules: [[heads, model]]\n", "t.yaml:1:18",
              "sharding_rules[0]: rule 'heads' names mesh axis 'model'");
}

TEST_CASE("config: unknown keys are errors with the valid keys and a suggestion") {
  std::string message = parse_error("model:\n  n_layr: 4\n");
  CAPTURE(message);
  CHECK(contains(message, "t.yaml:2:3: model.n_layr: unknown key 'n_layr' (did you mean 'n_layer'?)"));
  CHECK(contains(message, "valid keys in model: vocab_size, block_size, n_layer, n_head, n_embd, "
                          "dropout, bias"));

  message = parse_error("modle: {n_layer: 4}\n");
  CHECK(contains(message, "t.yaml:1:1: modle: unknown key 'modle' (did you mean 'model'?)"));
  CHECK(contains(message, "valid keys: mesh, sharding_rules, model, data, train, eval, checkpoint, "
                          "output, runtime"));

  // Nothing close: no suggestion, but still the list.
  message = parse_error("train:\n  frobnicate: 1\n");
  CHECK(contains(message, "t.yaml:2:3: train.frobnicate: unknown key 'frobnicate'; valid keys in "
                          "train: steps,"));
  CHECK_FALSE(contains(message, "did you mean"));

  check_error("model:\n  n_layer: 4\n  n_layer: 5\n", "t.yaml:3:3",
              "model.n_layer: duplicate key (first given at line 2)");
}

TEST_CASE("config: YAML syntax errors become UsageErrors with a location") {
  std::string message = parse_error("model: {n_layer: 4\ndata: {batch_size: 3}\n");
  CAPTURE(message);
  CHECK(contains(message, "t.yaml:2:"));  // yaml-cpp notices the unclosed '{' on line 2
  CHECK(contains(message, "YAML syntax error"));

  message = parse_error("model:\n  n_layer: 4\n n_head: 2\n");
  CAPTURE(message);
  CHECK(contains(message, "t.yaml:3:2: YAML syntax error"));

  check_error("model: {}\n---\ndata: {}\n", "t.yaml:3:1", "expected one YAML document, found 2");
}

TEST_CASE("config: --set overrides") {
  SUBCASE("values are YAML: lists, rules, floats and paths") {
    Config c = parse_config(kExample, "t.yaml",
                            {"mesh.shape=[2,4]", "sharding_rules=[[batch,data],[embed,null]]",
                             "model.dropout=0.1", "data.train=/x/y.bin"});
    CHECK(c.mesh.shape == std::vector<int64_t>{2, 4});
    REQUIRE(c.sharding_rules.size() == 2);
    CHECK(c.sharding_rules[0].logical == "batch");
    CHECK(c.sharding_rules[0].mesh_axes == std::vector<std::string>{"data"});
    CHECK(c.sharding_rules[1].logical == "embed");
    CHECK(c.sharding_rules[1].mesh_axes.empty());
    CHECK(c.model.dropout == 0.1);
    CHECK(c.data.train == "/x/y.bin");
    CHECK(c.data.val == "/data/val.bin");  // untouched keys keep the file's values
  }
  SUBCASE("later overrides win") {
    Config c = parse_config(kExample, "t.yaml", {"model.n_layer=2", "model.n_layer=6"});
    CHECK(c.model.n_layer == 6);
  }
  SUBCASE("a key absent from the file is created, with its maps") {
    Config c = parse_config("model: {n_layer: 2}\n", "t.yaml",
                            {"checkpoint.dir=/ckpt", "model.n_head=2", "runtime.backend=auto"});
    CHECK(c.checkpoint.dir == "/ckpt");
    CHECK(c.model.n_head == 2);
    CHECK(c.model.n_layer == 2);
    CHECK(c.runtime.backend == "auto");
    Config empty = parse_config("", "t.yaml", {"train.steps=5"});
    CHECK(empty.train.steps == 5);
  }
  SUBCASE("a whole section can be replaced") {
    Config c = parse_config("model: {n_layer: 2, n_head: 8, n_embd: 256}\n", "t.yaml",
                            {"model={n_layer: 3}"});
    CHECK(c.model.n_layer == 3);
    CHECK(c.model.n_head == Config().model.n_head);  // replaced, not merged
  }
  SUBCASE("unknown keys name the --set") {
    std::string message = parse_error(kExample, {"model.n_layr=3"});
    CAPTURE(message);
    CHECK(contains(message, "--set model.n_layr=3: model.n_layr: unknown key 'n_layr' "
                            "(did you mean 'n_layer'?)"));
    message = parse_error(kExample, {"trian.steps=3"});
    CHECK(contains(message, "--set trian.steps=3: trian: unknown key 'trian' (did you mean "
                            "'train'?)"));
  }
  SUBCASE("malformed overrides") {
    std::string message = parse_error(kExample, {"model.n_layer"});
    CHECK(contains(message, "--set model.n_layer: expected KEY=VALUE"));
    message = parse_error(kExample, {"=3"});
    CHECK(contains(message, "--set =3: invalid key ''"));
    message = parse_error(kExample, {"model..n_layer=3"});
    CHECK(contains(message, "--set model..n_layer=3: invalid key"));
    message = parse_error(kExample, {"model.n_layer=[3"});
    CHECK(contains(message, "--set model.n_layer=[3: model.n_layer: invalid YAML value"));
    message = parse_error(kExample, {"model.n_layer.x=3"});
    CHECK(contains(message, "--set model.n_layer.x=3: cannot set model.n_layer.x: model.n_layer "
                            "is \"4\", not a map"));
  }
  SUBCASE("errors in overridden values point at the --set") {
    check_error(kExample, "--set model.n_layer=-3",
                "model.n_layer: expected a positive integer, got \"-3\"", {"model.n_layer=-3"});
    check_error(kExample, "--set mesh.axes=[data,data]", "mesh.axes[1]: expected unique axis names",
                {"mesh.axes=[data,data]"});
    check_error(kExample, "--set sharding_rules=[[batch,pipe]]",
                "sharding_rules[0]: rule 'batch' names mesh axis 'pipe'",
                {"sharding_rules=[[batch,pipe]]"});
    check_error("", "--set checkpoint.keep=0", "checkpoint.keep: expected an integer >= 1",
                {"checkpoint.keep=0"});
    // A later override of the same key replaces the earlier one's location too.
    check_error(kExample, "--set model.n_layer=-1", "model.n_layer", {"model.n_layer=x", "model.n_layer=-1"});
    // ... and errors in keys the overrides did not touch still point into the file.
    check_error("model:\n  n_head: 0\n", "t.yaml:2:11", "model.n_head: expected a positive integer",
                {"model.n_layer=8"});
  }
}

TEST_CASE("config: resolved_yaml re-parses to the same config") {
  Config c = parse_config(kExample, "t.yaml",
                          {"model.dropout=0.1", "train.lr=3.0e-7", "runtime.timeout_s=12.5", "train.microbatches=3",
                           "data.val=null", "output.dir='null'",
                           "sharding_rules=[[batch,[data,model]],[embed,null],[mlp,model]]"});
  CAPTURE(c.resolved_yaml);
  CHECK(c.output.dir == "null");  // quoted: a string, not a YAML null
  CHECK(c.data.val.empty());
  CHECK(contains(c.resolved_yaml, "threads_per_rank: auto"));
  CHECK(contains(c.resolved_yaml, "dropout: 0.1\n"));
  CHECK(c.resolved_yaml == spmd::to_yaml(c));
  Config again = parse_config(c.resolved_yaml, "resolved.yaml");
  check_same(again, c);
  CHECK(again.resolved_yaml == c.resolved_yaml);

  Config defaults = parse_config("", "t.yaml");
  check_same(parse_config(defaults.resolved_yaml, "resolved.yaml"), defaults);

  Config threads = parse_config("runtime: {threads_per_rank: 6}\n", "t.yaml");
  check_same(parse_config(threads.resolved_yaml, "resolved.yaml"), threads);
}

TEST_CASE("config: load_config reads files and names them in errors") {
  spmd::test::TempDir dir;
  const std::string path = dir.file("run.yaml");
  spmd::test::write_file(path, kExample);
  Config c = spmd::load_config(path, {"model.n_layer=6"});
  CHECK(c.source_path == path);
  CHECK(c.model.n_layer == 6);
  CHECK(c.mesh.shape == std::vector<int64_t>{4, 2});

  spmd::test::write_file(path, "model:\n  n_embd: 0\n");
  std::string message = error_of([&] { spmd::load_config(path); });
  CHECK(contains(message, path + ":2:11: model.n_embd: expected a positive integer"));

  const std::string missing = dir.file("missing.yaml");
  message = error_of([&] { spmd::load_config(missing); });
  CHECK(contains(message, missing + ": cannot read config file"));
  message = error_of([&] { spmd::load_config(dir.path()); });
  CHECK(contains(message, dir.path() + ": cannot read config file"));
}

TEST_CASE("config: runtime.tf32 is on unless set false, and the resolved config names it only when off") {
  const Config on = parse_config("runtime: {device: cuda}\n", "t.yaml");
  CHECK(on.runtime.tf32);
  CHECK(!contains(on.resolved_yaml, "tf32"));
  const Config off = parse_config("runtime: {device: cuda}\n", "t.yaml", {"runtime.tf32=false"});
  CHECK_FALSE(off.runtime.tf32);
  CHECK(contains(off.resolved_yaml, "tf32: false"));
  CHECK_FALSE(parse_config(off.resolved_yaml, "resolved.yaml").runtime.tf32);  // a resume keeps it
  CHECK(contains(parse_error("runtime: {tf32: sometimes}\n"), "runtime.tf32"));
}

TEST_CASE("config: model.arch llama: its defaults, its keys' checks, and its keys refused for gpt2") {
  const Config gpt2 = parse_config("model: {n_head: 4, n_embd: 32}\n", "t.yaml");
  CHECK(gpt2.model.arch == spmd::ModelArch::kGpt2);
  CHECK(gpt2.model.tie_embeddings);
  CHECK(!contains(gpt2.resolved_yaml, "arch"));  // gpt2 configs print as before
  const Config llama = parse_config("model: {arch: llama, n_head: 4, n_embd: 32}\n", "t.yaml");
  CHECK(llama.model.n_kv_head == 4);
  CHECK(llama.model.intermediate_size == 128);
  CHECK(!llama.model.tie_embeddings);
  CHECK(!llama.model.bias);
  CHECK(llama.model.rope_scaling.factor == 0);
  const Config scaled = parse_config(
      "model:\n  arch: llama\n  n_head: 4\n  n_kv_head: 2\n  n_embd: 32\n  rope_theta: 500000\n"
      "  rope_scaling: {factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192}\n",
      "t.yaml");
  CHECK(scaled.model.rope_scaling.factor == 8);
  CHECK(scaled.model.rope_scaling.original_max_position_embeddings == 8192);
  // The resolved YAML reads back to the same model.
  const Config again = parse_config(scaled.resolved_yaml, "resolved.yaml");
  CHECK(again.model.arch == spmd::ModelArch::kLlama);
  CHECK(again.model.n_kv_head == 2);
  CHECK(again.model.rope_theta == 500000);
  CHECK(again.model.rope_scaling.high_freq_factor == 4);
  CHECK(again.model.tie_embeddings == false);

  check_error("model: {arch: llama, n_head: 4, n_kv_head: 3, n_embd: 32}\n", "t.yaml:1:44",
              "model.n_kv_head: expected a divisor of model.n_head = 4");
  check_error("model: {arch: llama, bias: true}\n", "t.yaml:1:28", "model.bias: expected false: llama has no biases");
  check_error("model: {arch: llama2}\n", "t.yaml:1:15", "model.arch: expected one of gpt2, llama");
  check_error("model: {n_kv_head: 2}\n", "t.yaml:1:20", "model.n_kv_head: is a llama key (model.arch: llama)");
  check_error("model: {arch: llama, rope_scaling: {factor: 8}}\n", "t.yaml:1:36", "model.rope_scaling.low_freq_factor: missing");
  check_error("model: {arch: llama, rope_scaling: {factor: 8, low_freq_factor: 4, high_freq_factor: 1, "
              "original_max_position_embeddings: 8192}}\n",
              "t.yaml:1:86", "model.rope_scaling.high_freq_factor: expected a number above low_freq_factor = 4.0");
  check_error("model: {arch: llama, rms_norm_eps: 0}\n", "t.yaml:1:36", "model.rms_norm_eps: expected a number in (0, 1)");
}

TEST_CASE("config: llama key/value heads that do not divide over their axis name model.n_kv_head") {
  const std::string message = error_of([] {
    spmd::plan_layout(parse_config("mesh: {shape: [1, 4], axes: [data, model]}\n"
                                   "sharding_rules: [[batch, data], [heads, model], [mlp, model], [vocab, model], [embed, null], "
                                   "[seq, null], [kv, null]]\n"
                                   "model: {arch: llama, n_head: 4, n_kv_head: 2, n_embd: 32}\n",
                                   "t.yaml"));
  });
  CAPTURE(message);
  CHECK(contains(message, "h.0.attn.k.weight: dim 1 (logical axis 'heads', model.n_kv_head = 2) does not divide over "
                          "mesh axis 'model' of size 4"));
  CHECK(contains(message, "set model.n_kv_head to 4"));
}
