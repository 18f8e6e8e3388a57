// Shared by the multi-process training tests: the tiny model on a generated corpus,
// the meshes under test, reading metrics.jsonl, and the commands the tests run around training.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace spmd::test {

// 2 layers, width 32, 8 heads, vocab 72, block 16, global batch 8; a [1,1] mesh by default.
struct TinyRun {
  TempDir dir;
  std::string config;
  TinyRun() {
    write_token_file(dir.file("train.bin"), 20000, 72, 1);
    write_token_file(dir.file("val.bin"), 4000, 72, 2);
    config = dir.file("tiny.yaml");
    write_file(config, "mesh: {shape: [1, 1], axes: [data, model]}\n"
                       "sharding_rules: [[batch, data], [vocab, model], [heads, model], [mlp, model], "
                       "[embed, null], [seq, null], [kv, null]]\n"
                       "model: {vocab_size: 72, block_size: 16, n_layer: 2, n_head: 8, n_embd: 32, dropout: 0.0}\n"
                       "data: {train: " + dir.file("train.bin") + ", val: " + dir.file("val.bin") +
                       ", batch_size: 8}\n"
                       "train: {steps: 12, decay_steps: 12, warmup_steps: 3, lr: 3.0e-3, log_every: 1, "
                       "eval_every: 6, eval_batches: 2}\n"
                       "runtime: {timeout_s: 60, device: cpu, backend: gloo}\n");  // CPU also where a GPU is visible
  }
};

struct TestMesh {
  std::string name, shape, axes, rules;
};

// The rules for the logical axes a test leaves unsharded, after the ones it shards; for tests that
// shard `seq`, all but that.
inline const std::string kOthers = "[vocab, null], [heads, null], [mlp, null], [embed, null], [seq, null], [kv, null]";
inline const std::string kOthersButSeq = "[vocab, null], [heads, null], [mlp, null], [embed, null], [kv, null]";

inline const std::string kTpRules =
    "[[batch, data], [vocab, model], [heads, model], [mlp, model], [embed, null], [seq, null], [kv, null]]";
inline const std::vector<TestMesh> kMeshes{
    {"dp-8x1", "[8,1]", "[data,model]", kTpRules},
    {"hybrid-4x2", "[4,2]", "[data,model]", kTpRules},
    {"hybrid-2x4", "[2,4]", "[data,model]", kTpRules},
    {"tp-1x8", "[1,8]", "[data,model]", kTpRules},
    {"fsdp-8", "[8]", "[fsdp]",
     "[[batch, fsdp], [embed, fsdp], [vocab, null], [heads, null], [mlp, null], [seq, null], [kv, null]]"},
    {"3d-2x2x2", "[2,2,2]", "[data,fsdp,model]",
     "[[batch, [data, fsdp]], [embed, fsdp], [vocab, model], [heads, model], [mlp, model], [seq, null], [kv, null]]"},
};

// The tiny model as a Llama (model.arch llama): 4 query heads, 2 key/value heads, an untied head
// (the rest of TinyRun's model: 2 layers, width 32, vocab 72, block 16).
inline const std::vector<std::string> kTinyLlama{"--set", "model.arch=llama", "--set", "model.n_head=4", "--set",
                                                 "model.n_kv_head=2", "--set", "model.intermediate_size=64", "--set",
                                                 "model.tie_embeddings=false"};

inline const TestMesh& test_mesh(const std::string& name) {
  for (const auto& m : kMeshes)
    if (m.name == name) return m;
  throw std::runtime_error("no test mesh " + name);
}

inline std::vector<std::string> mesh_args(const TestMesh& m) {
  return {"--set", "mesh.shape=" + m.shape, "--set", "mesh.axes=" + m.axes, "--set", "sharding_rules=" + m.rules};
}
inline std::vector<std::string> mesh_args(const std::string& shape, const std::string& axes, const std::string& rules) {
  return mesh_args(TestMesh{"", shape, axes, rules});
}

// The arguments a, then more.
inline std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

struct Curve {
  std::vector<double> loss, val_loss;
};

// The training losses from step `from` on.
inline Curve tail(const Curve& c, size_t from) {
  Curve t;
  t.loss.assign(c.loss.begin() + static_cast<long>(from), c.loss.end());
  return t;
}

inline Curve read_metrics(const std::string& path) {
  Curve c;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    c.loss.push_back(j["loss"].get<double>());
    if (j.contains("val_loss")) c.val_loss.push_back(j["val_loss"].get<double>());
  }
  return c;
}

// spmd-train on the tiny config with output.dir=out and extra arguments; returns the process.
// `hooks` goes to SPMD_TEST_HOOKS (the fault-injection point, lib/util/test_hooks.h).
inline ProcessResult run_train(const TinyRun& run, const std::string& out, const std::vector<std::string>& extra,
                               const std::string& hooks = "") {
  std::vector<std::string> argv{binary_path("spmd-train"), "--config", run.config, "--set", "output.dir=" + out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  std::map<std::string, std::string> env;
  if (!hooks.empty()) env["SPMD_TEST_HOOKS"] = hooks;
  return run_process(argv, env, 300);
}

// The facts a finished run wrote for programs: output.dir/summary.json.
inline nlohmann::json read_summary(const std::string& out) {
  std::ifstream in(out + "/summary.json");
  REQUIRE_MESSAGE(in.good(), out << "/summary.json is missing");
  return nlohmann::json::parse(in);
}

// The same, requiring success; returns the loss curve.
inline Curve train(const TinyRun& run, const std::string& out, const std::vector<std::string>& extra) {
  auto r = run_train(run, out, extra);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return read_metrics(out + "/metrics.jsonl");
}

// The largest relative difference between two curves' step losses.
inline double max_rel_diff(const Curve& a, const Curve& b) {
  double worst = 0;
  for (size_t i = 0; i < a.loss.size() && i < b.loss.size(); ++i)
    worst = std::max(worst, std::abs(a.loss[i] / b.loss[i] - 1));
  return worst;
}

// The invariance tests' tolerance: a mesh reproduces one process to float rounding, each step's loss
// and gradient norm to this relative difference (observed on CPU: ~1e-7; a real drift, such as a
// gradient scaled by an axis size, is orders of magnitude larger).
constexpr double kFloatRounding = 1e-5;

inline void check_same_curve(const Curve& got, const Curve& want, double rel) {
  REQUIRE(got.loss.size() == want.loss.size());
  REQUIRE(got.val_loss.size() == want.val_loss.size());
  for (size_t i = 0; i < want.loss.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got.loss[i] - want.loss[i]) <= rel * std::abs(want.loss[i]));
  }
  for (size_t i = 0; i < want.val_loss.size(); ++i)
    CHECK(std::abs(got.val_loss[i] - want.val_loss[i]) <= rel * std::abs(want.val_loss[i]));
}

// Each step's global gradient norm from out/metrics.jsonl: a gradient scaled by an axis size or a
// microbatch count shows here even where AdamW's scale invariance hides it in the loss.
inline std::vector<double> grad_norms(const std::string& out) {
  std::vector<double> norms;
  std::ifstream in(out + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) norms.push_back(nlohmann::json::parse(line)["grad_norm"].get<double>());
  return norms;
}

// A run's gradient norms (out/metrics.jsonl) against a reference's, step by step, to `rel`.
inline void check_same_grad_norms(const std::string& out, const std::vector<double>& want, double rel) {
  const auto norms = grad_norms(out);
  REQUIRE(norms.size() == want.size());
  for (size_t i = 0; i < norms.size(); ++i) CHECK(norms[i] == doctest::Approx(want[i]).epsilon(rel));
}

// spmd-inspect --json on a config with extra arguments, requiring success.
inline nlohmann::json inspect_json_of(const std::string& config, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv{binary_path("spmd-inspect"), "--config", config, "--json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const auto r = run_process(argv, {}, 60);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return nlohmann::json::parse(r.output);
}

// A char-level corpus (`lines` lines of two short sentences, 20 symbols) written to dir/corpus.txt
// and prepared by spmd-prepare into dir/`name` (a tokenizer a checkpoint carries); returns that folder.
inline std::string prepare_char_corpus(const TempDir& dir, int lines, const std::string& name) {
  std::string text;
  for (int i = 0; i < lines; ++i) text += "the cat sat on the mat. a dog ran to the log.\n";
  write_file(dir.file("corpus.txt"), text);
  const auto prep = run_process({binary_path("spmd-prepare"), "--input", dir.file("corpus.txt"), "--out",
                                 dir.file(name), "--quiet"});
  REQUIRE_MESSAGE(prep.exit_code == 0, prep.output);
  return dir.file(name);
}

// --set arguments that train on a prepared folder's train.bin and val.bin with its vocabulary size.
inline std::vector<std::string> prepared_data(const std::string& folder, int vocab_size) {
  return {"--set", "data.train=" + folder + "/train.bin", "--set", "data.val=" + folder + "/val.bin", "--set",
          "model.vocab_size=" + std::to_string(vocab_size)};
}

// `spmd-train sample` of `tokens` tokens after "the " (seed 7) from a checkpoint, on the mesh its
// config names; the text it wrote to `out` (stdout only: run_process interleaves stderr).
inline std::string sample_text(const std::string& checkpoint, const std::string& out, int tokens) {
  auto r = run_process({binary_path("spmd-train"), "sample", "--checkpoint", checkpoint, "--prompt", "the ",
                        "--tokens", std::to_string(tokens), "--seed", "7", "--text-out", out},
                       {}, 120);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return read_file(out);
}

// A training run with `args` refused before launch: exit 2 within 30 s (not a worker's timeout),
// saying every one of `said`, with no C++ exception trace.
inline void check_refused(const TinyRun& run, const std::vector<std::string>& args, const std::vector<std::string>& said) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_train(run, run.dir.file("bad"), args);
  CHECK(r.exit_code == 2);
  for (const auto& text : said) CHECK_MESSAGE(r.output.find(text) != std::string::npos, r.output);
  CHECK(r.output.find("terminate called") == std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));  // refused, not a timeout
}

}  // namespace spmd::test
