// Multiple-choice benchmarks (eval.tasks while training, `spmd-train eval` from a checkpoint) as
// real processes: the same scores on one process and on data-parallel, tensor-parallel, FSDP,
// pipeline and context-parallel meshes; the score a run logs after S steps equals what `eval`
// gives its step-S checkpoint; bad task files and keys exit 2 naming them.
#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "test_support.h"
#include "training_fixture.h"

using namespace spmd::test;

namespace {
const char* const kWords[] = {"the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "log", "bird", "sang", "hill"};

std::string words(std::mt19937& rng, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? " " : "") + std::string(kWords[rng() % std::size(kWords)]);
  return s;
}

// A character dataset spmd-prepare wrote (its tokenizer beside it), a task file of 16 rows in its
// characters (some longer than block_size), and a tiny config scoring the task every 2 steps.
struct EvalRun {
  TempDir dir;
  std::string config, task;
  EvalRun() {
    std::mt19937 rng(5);
    std::string text;
    for (int i = 0; i < 600; ++i) text += words(rng, 10) + ".\n";
    write_file(dir.file("corpus.txt"), text);
    auto prep = run_process({binary_path("spmd-prepare"), "--input", dir.file("corpus.txt"), "--out", dir.file("data"),
                             "--vocab", "char", "--quiet"});
    REQUIRE_MESSAGE(prep.exit_code == 0, prep.output);
    task = dir.file("task.jsonl");
    std::string rows;
    for (int i = 0; i < 16; ++i) {
      const int n = i % 4 == 0 ? 3 : 4;
      nlohmann::json endings = nlohmann::json::array();
      for (int k = 0; k < n; ++k) endings.push_back(words(rng, 1 + static_cast<int>(rng() % 3)) + ".");
      const nlohmann::json row{{"ctx", words(rng, i % 5 == 0 ? 8 : 2)}, {"endings", endings}, {"label", static_cast<int>(rng() % n)}};
      rows += row.dump() + "\n";
    }
    write_file(task, rows);
    config = dir.file("tiny.yaml");
    write_file(config, "mesh: {shape: [1, 1], axes: [data, model]}\n"
                       "sharding_rules: " + kTpRules + "\n"
                       "model: {vocab_size: 32, block_size: 24, n_layer: 2, n_head: 4, n_embd: 32, dropout: 0.0}\n"
                       "data: {train: " + dir.file("data/train.bin") + ", val: " + dir.file("data/val.bin") +
                       ", batch_size: 8}\n"
                       "train: {steps: 4, decay_steps: 4, warmup_steps: 1, lr: 1.0e-2, log_every: 10, eval_every: 0}\n"
                       "eval: {tasks: [{name: mc, path: " + task + ", every: 2}]}\n"
                       "runtime: {timeout_s: 60, device: cpu, backend: gloo}\n");
  }

  ProcessResult train(const std::string& out, const std::vector<std::string>& extra) const {
    std::vector<std::string> argv{binary_path("spmd-train"), "--config", config, "--set", "output.dir=" + out};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv, {}, 300);
  }

  // `spmd-train eval --json`, the result written to a file (stdout and stderr interleave here).
  nlohmann::json eval(const std::vector<std::string>& args) const {
    const std::string result = dir.file("result.json");
    std::vector<std::string> argv{binary_path("spmd-train"), "eval", "--task", task, "--json", "--result-out", result};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = run_process(argv, {}, 300);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    std::ifstream in(result);
    return nlohmann::json::parse(in);
  }
};

const EvalRun& eval_run() {
  static EvalRun run;
  return run;
}

// Each scored record of metrics.jsonl: {step, acc, acc_norm, n}.
std::vector<nlohmann::json> task_records(const std::string& out) {
  std::vector<nlohmann::json> records;
  std::ifstream in(out + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("eval/mc/acc"))
      records.push_back({{"step", j["step"]}, {"acc", j["eval/mc/acc"]}, {"acc_norm", j["eval/mc/acc_norm"]}, {"n", j["eval/mc/n"]}});
  }
  return records;
}



struct NamedMesh {
  std::string name;
  std::vector<std::string> args;
};

const std::vector<NamedMesh>& meshes() {
  static const std::vector<NamedMesh> all{
      {"data-model-2x2 (DP + TP, vocab-parallel)", mesh_args("[2,2]", "[data,model]", kTpRules)},
      {"fsdp-2", mesh_args("[2]", "[fsdp]", "[[batch, fsdp], [embed, fsdp], [vocab, null], [heads, null], [mlp, null], [seq, null], [kv, null]]")},
      {"data-stage-2x2 (pipeline)",
       [] {
         auto a = mesh_args("[2,2]", "[data,stage]", "[[batch, data], [layers, stage], [seq, null], " + kOthersButSeq + "]");
         a.insert(a.end(), {"--set", "train.microbatches=2"});
         return a;
       }()},
      {"data-context-2x2 (context parallel)", mesh_args("[2,2]", "[data,context]", "[[batch, data], [seq, context], " + kOthersButSeq + "]")},
  };
  return all;
}

void check_same_scores(const nlohmann::json& got, const nlohmann::json& want) {
  REQUIRE(got["n"] == want["n"]);
  CHECK(got["acc"] == want["acc"]);
  CHECK(got["acc_norm"] == want["acc_norm"]);
  for (size_t i = 0; i < want["examples"].size(); ++i)
    for (const char* key : {"sum", "mean"})
      for (size_t c = 0; c < want["examples"][i][key].size(); ++c) {
        const double a = got["examples"][i][key][c], b = want["examples"][i][key][c];
        CAPTURE(i);
        CAPTURE(key);
        CAPTURE(c);
        CHECK(std::abs(a - b) <= kFloatRounding * std::abs(b));
      }
}
}  // namespace

TEST_CASE("eval: tasks scored while training give the same acc and acc_norm on DP, TP, FSDP, pipeline and context-parallel meshes") {
  const EvalRun& run = eval_run();
  const std::string single_out = run.dir.file("out-single"), ck = run.dir.file("ck");
  auto r = run.train(single_out, {"--set", "checkpoint.dir=" + ck, "--set", "checkpoint.every=2"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(r.output.find("| mc acc ") != std::string::npos);  // the progress line shows the score
  const auto want = task_records(single_out);
  REQUIRE(want.size() == 2);
  CHECK(want[0]["step"] == 2);
  CHECK(want[1]["step"] == 4);
  CHECK(want[0]["n"] == 16);
  // The record of step S scores the model after S updates: what `eval` gives step S's checkpoint.
  for (int s : {2, 4}) {
    const auto scored = run.eval({"--checkpoint", ck + "/step_0000000" + std::to_string(s)});
    CAPTURE(s);
    CHECK(scored["acc"] == want[static_cast<size_t>(s / 2 - 1)]["acc"]);
    CHECK(scored["acc_norm"] == want[static_cast<size_t>(s / 2 - 1)]["acc_norm"]);
  }
  for (const auto& m : meshes()) {
    CAPTURE(m.name);
    const std::string out = run.dir.file("out-" + std::to_string(&m - meshes().data()));
    r = run.train(out, m.args);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    CHECK(task_records(out) == want);
  }
}

TEST_CASE("eval: spmd-train eval gives every example's per-choice losses on any mesh as on one process") {
  const EvalRun& run = eval_run();
  const std::string ck = run.dir.file("ck-eval");
  auto r = run.train(run.dir.file("out-eval"), {"--set", "checkpoint.dir=" + ck, "--set", "checkpoint.every=4"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const auto want = run.eval({"--checkpoint", ck});  // a checkpoint.dir: its newest
  REQUIRE(want["n"] == 16);
  REQUIRE(want["examples"][0]["sum"].size() == 3);
  for (const auto& m : meshes()) {
    CAPTURE(m.name);
    std::vector<std::string> args{"--checkpoint", ck};
    args.insert(args.end(), m.args.begin(), m.args.end());
    check_same_scores(run.eval(args), want);
  }
  const auto limited = run.eval({"--checkpoint", ck, "--limit", "3"});
  CHECK(limited["n"] == 3);
  CHECK(limited["examples"].size() == 3);
}

TEST_CASE("eval: a mixture of experts gives one process's per-choice losses with its experts over 2 ranks and EP x TP") {
  const EvalRun& run = eval_run();
  const std::string ck = run.dir.file("ck-experts");
  const std::string rules =
      "[[batch, data], [expert, data], [vocab, model], [heads, model], [mlp, model], [embed, null], [seq, null], [kv, null]]";
  auto r = run.train(run.dir.file("out-experts"),
                     {"--set", "checkpoint.dir=" + ck, "--set", "checkpoint.every=4", "--set", "model.arch=llama", "--set",
                      "model.moe={num_experts: 4, num_experts_per_tok: 2, moe_intermediate_size: 32}", "--set",
                      "sharding_rules=" + rules, "--set", "eval.tasks=[]"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const auto want = run.eval({"--checkpoint", ck});
  REQUIRE(want["n"] == 16);
  for (const char* shape : {"[2,1]", "[2,2]"}) {
    CAPTURE(shape);
    check_same_scores(run.eval({"--checkpoint", ck, "--set", std::string("mesh.shape=") + shape}), want);
  }
}

TEST_CASE("eval: a bad task file or eval key exits 2 naming the file, line, field or key") {
  const EvalRun& run = eval_run();
  const std::string bad = run.dir.file("bad.jsonl");
  write_file(bad, "{\"ctx\": \"the cat\", \"endings\": [\"sat.\", \"ran.\"], \"label\": 0}\n"
                  "{\"ctx\": \"the dog\", \"endings\": [\"sat.\", \"ran.\"], \"label\": 5}\n");
  auto r = run.train(run.dir.file("out-bad"), {"--set", "eval.tasks=[{name: mc, path: " + bad + "}]"});
  check_failed_with(r, 2, "eval.tasks[0] (mc): " + bad + ":2: field 'label': 5 is out of range");
  r = run.train(run.dir.file("out-bad"), {"--set", "eval.tasks=[{name: 'a b', path: " + bad + "}]"});
  check_failed_with(r, 2, "eval.tasks[0].name");
  r = run.train(run.dir.file("out-bad"), {"--set", "eval.tasks=[{name: mc, path: " + bad + ", every: 0}]"});
  check_failed_with(r, 2, "eval.tasks[0].every");
  r = run.train(run.dir.file("out-bad"), {"--set", "eval.tasks=[{name: mc}]"});
  check_failed_with(r, 2, "eval.tasks[0].path");
  r = run_process({binary_path("spmd-train"), "eval", "--config", run.config, "--task", bad}, {}, 120);
  check_failed_with(r, 2, "train.init_from is empty and there is no --checkpoint");
}
