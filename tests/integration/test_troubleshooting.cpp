// The mistakes a newcomer makes in the first hour, each run for real: spmd-train must exit 2
// before any worker starts, with one message that names the culprit and the fix. The table of
// mistakes and messages is written to <build>/troubleshooting.md; README.md's troubleshooting
// section is that file.
#include <doctest/doctest.h>

#include <filesystem>

#include <unistd.h>

#include "ports.h"
#include "test_support.h"

using namespace spmd::test;

namespace {
struct Mistake {
  std::string what;                 // the mistake, for the table
  std::vector<std::string> args;    // after `spmd-train --config run.yaml` (or instead: see config_arg)
  std::vector<std::string> expect;  // substrings of the message
  bool config_arg = true;           // false: args are the whole command line
};

// 4 heads, width 32, vocab 65, block 16 on a [2, 2] (data, model) mesh; 4000 train tokens.
struct Workspace {
  TempDir dir;
  std::string config = dir.file("run.yaml");
  Workspace() {
    write_token_file(dir.file("train.bin"), 4000, 65, 1);
    write_token_file(dir.file("val.bin"), 1000, 65, 2);
    write_file(dir.file("a-file"), "x");
    std::filesystem::create_directories(dir.file("prepared"));
    write_file(dir.file("prepared/meta.json"), "{}");  // spmd-prepare's output directory
    write_file(dir.file("broken.yaml"), "mesh: {shape: [2, 2], axes: [data, model]}\nmodel:\n  n_layer: [2\n");
    write_file(config, "mesh: {shape: [2, 2], axes: [data, model]}\n"
                       "sharding_rules: [[batch, data], [vocab, model], [heads, model], [mlp, model], "
                       "[embed, null], [seq, null], [kv, null]]\n"
                       "model: {vocab_size: 65, block_size: 16, n_layer: 1, n_head: 4, n_embd: 32}\n"
                       "data: {train: " + dir.file("train.bin") + ", val: " + dir.file("val.bin") +
                       ", batch_size: 12}\n"
                       "train: {steps: 2, eval_every: 0}\n"
                       "output: {dir: " + dir.file("out") + "}\n"
                       "runtime: {timeout_s: 20}\n");
  }
  // The message with this workspace's path shown as `run/`.
  std::string shown(std::string text) const {
    for (size_t at; (at = text.find(dir.path())) != std::string::npos;) text.replace(at, dir.path().size(), "run");
    return text;
  }
};

const std::string kTypoRules = "sharding_rules=[[batch, data], [vocab, model], [heads, model], [mlp, model], "
                               "[embd, null], [seq, null], [kv, null]]";

std::vector<Mistake> mistakes(const Workspace& ws) {
  const std::string d = ws.dir.path();
  return {
      {"data file that does not exist", {"--set", "data.train=/nope.bin"}, {"data.train: /nope.bin: no such token file"}},
      {"resume from a directory that holds no checkpoint", {"--resume", "/tmp"}, {"--resume /tmp", "index.json"}},
      {"mesh axis that does not divide the heads",
       {"--set", "mesh.shape=[3,3]"},
       {"logical axis 'heads'", "model.n_head = 4", "mesh axis 'model' of size 3", "model.n_head to 3 or 6",
        "mesh axis 'model' 1, 2 or 4"}},
      {"typo in a sharding rule's logical name", {"--set", kTypoRules}, {"'embd'", "did you mean 'embed'"}},
      {"typo in a rule's mesh axis", {"--set", "sharding_rules=[[batch, data], [heads, modle]]"}, {"'modle'", "model"}},
      {"--nproc that does not match the mesh", {"--nproc", "3"}, {"--nproc 3", "4 devices"}},
      {"unknown config key", {"--set", "model.n_layers=2"}, {"n_layers", "did you mean 'n_layer'"}},
      {"value of the wrong type", {"--set", "model.n_layer=two"}, {"model.n_layer", "two"}},
      {"negative learning rate", {"--set", "train.lr=-1"}, {"train.lr"}},
      {"batch that does not split over the data axis",
       {"--set", "data.batch_size=3"},
       {"logical axis 'batch'", "data.batch_size = 3", "mesh axis 'data' of size 2", "data.batch_size to 2 or 4"}},
      {"model.vocab_size below the data's token ids",
       {"--set", "model.vocab_size=20"},
       {"data.train", "token ids up to 64", "model.vocab_size to at least 65"}},
      {"model.block_size longer than the data", {"--set", "model.block_size=8192"}, {"data.train", "model.block_size"}},
      {"config file that does not exist", {"--config", d + "/absent.yaml"}, {"absent.yaml"}, false},
      {"YAML syntax error", {"--config", d + "/broken.yaml"}, {"broken.yaml:4:1: YAML syntax error"}, false},
      {"checkpoint dir that cannot be written", {"--set", "checkpoint.dir=" + d + "/a-file/ck"}, {"checkpoint.dir"}},
      {"unknown backend", {"--set", "runtime.backend=mpi"}, {"runtime.backend", "mpi"}},
      {"n_embd not divisible by n_head", {"--set", "model.n_head=3"}, {"model.n_embd", "model.n_head = 3"}},
      {"train.microbatches that do not split the batch", {"--set", "train.microbatches=5"}, {"train.microbatches = 5"}},
      {"a prepared dataset's directory as data.train", {"--set", "data.train=" + d + "/prepared"}, {"meta.json", "train.bin"}},
      {"--resume without checkpoint.dir", {"--resume"}, {"checkpoint.dir"}},
  };
}

std::string cell(std::string text) {
  for (size_t at = 0; (at = text.find('|', at)) != std::string::npos; at += 2) text.replace(at, 1, "\\|");
  return text;
}

// The line a person reads: the first one saying `error`.
std::string error_line(const std::string& output) {
  size_t at = output.find("error");
  if (at == std::string::npos) return output;
  size_t begin = output.rfind('\n', at);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return output.substr(begin, output.find('\n', at) - begin);
}
}  // namespace

TEST_CASE("troubleshooting: each newcomer mistake exits 2 before any worker, naming the culprit") {
  Workspace ws;
  std::string table = "| # | Mistake | Command | What spmd-train says (exit code) |\n|---|---|---|---|\n";
  int n = 0;
  for (const auto& m : mistakes(ws)) {
    CAPTURE(m.what);
    std::vector<std::string> argv{binary_path("spmd-train")};
    if (m.config_arg) argv.insert(argv.end(), {"--config", ws.config});
    argv.insert(argv.end(), m.args.begin(), m.args.end());
    auto r = run_process(argv, {}, 60);
    CHECK_MESSAGE(r.exit_code == 2, r.output);
    for (const auto& e : m.expect) CHECK_MESSAGE(r.output.find(e) != std::string::npos, (e + "\n" + r.output));
    CHECK_MESSAGE(r.output.find("[rank") == std::string::npos, r.output);  // no worker started
    CHECK(r.output.find("step ") == std::string::npos);
    std::string command = "spmd-train";
    for (size_t i = 1; i < argv.size(); ++i)
      command += " " + (argv[i].find(' ') == std::string::npos ? argv[i] : "'" + argv[i] + "'");
    table += "| " + std::to_string(++n) + " | " + cell(m.what) + " | `" + cell(ws.shown(command)) + "` | " +
             cell(ws.shown(error_line(r.output))) + " (" + std::to_string(r.exit_code) + ") |\n";
  }
  CHECK(n >= 15);
  write_file(std::string(SPMD_BINARY_DIR) + "/troubleshooting.md", table);
}

TEST_CASE("troubleshooting: ranks another tool launched learn rank 0's verdict and exit 2 quietly") {
  Workspace ws;
  const std::string port = unused_port();
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int rank = 0; rank < 2; ++rank) {
    argvs.push_back({binary_path("spmd-train"), "--config", ws.config, "--set", "mesh.shape=[2,1]", "--set",
                     "data.train=/nope.bin"});
    envs.push_back({{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", std::to_string(rank)},
                    {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
  }
  auto results = run_processes(argvs, envs, 60);
  CHECK_MESSAGE(results[0].exit_code == 2, results[0].output);
  CHECK_MESSAGE(results[0].output.find("spmd-train[rank 0]: error: data.train: /nope.bin") != std::string::npos,
                results[0].output);
  CHECK_MESSAGE(results[1].exit_code == 2, results[1].output);
  CHECK(results[1].output.find("rank 0 found a problem") != std::string::npos);
  CHECK(results[1].output.find('\n') == results[1].output.rfind('\n'));  // one line
}
