// spmd-train sample: the same text on every mesh, the KV cache against the full forward, the
// sliding context, the tokenizer carried by the checkpoint, bad arguments, samples while training.
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "test_support.h"
#include "training_fixture.h"

using namespace spmd::test;

namespace {

// A char-level dataset made by spmd-prepare and a tiny model trained on it (one process, [1,1]
// mesh with data x model axes), checkpointed at its last step. `model` adds model keys (a family).
struct SampledRun {
  TempDir dir;
  std::string config, checkpoint;
  explicit SampledRun(const std::string& model = "", const std::string& rules = kTpRules) {
    prepare_char_corpus(dir, 300, "data");
    config = dir.file("tiny.yaml");
    write_file(config, "mesh: {shape: [1, 1], axes: [data, model]}\n"
                       "sharding_rules: " + rules + "\n"
                       "model: {vocab_size: 20, block_size: 16, n_layer: 2, n_head: 4, n_embd: 32, dropout: 0.0" + model + "}\n"
                       "data: {train: " + dir.file("data/train.bin") + ", val: " + dir.file("data/val.bin") +
                       ", batch_size: 8}\n"
                       "train: {steps: 40, decay_steps: 40, warmup_steps: 5, lr: 1.0e-2, log_every: 10, eval_every: 0}\n"
                       "checkpoint: {dir: " + dir.file("ckpt") + ", every: 40}\n"
                       "output: {dir: " + dir.file("out") + "}\n"
                       "runtime: {timeout_s: 60, device: cpu, backend: gloo}\n");
    auto train = run_process({binary_path("spmd-train"), "--config", config}, {}, 120);
    REQUIRE_MESSAGE(train.exit_code == 0, train.output);
    checkpoint = dir.file("ckpt/step_00000040");
    REQUIRE(std::filesystem::exists(checkpoint + "/tokenizer/meta.json"));
  }
  ProcessResult sample(std::vector<std::string> args) const {
    std::vector<std::string> argv{binary_path("spmd-train"), "sample", "--checkpoint", checkpoint};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, {}, 120);
  }
};

const SampledRun& sampled_run() {
  static SampledRun run;
  return run;
}

// The same with a Llama: 2 key/value heads for the 4 query heads, an untied head.
const SampledRun& llama_sampled_run() {
  static SampledRun run(", arch: llama, n_kv_head: 2, tie_embeddings: false");
  return run;
}

// The same as a mixture of experts (docs/experts.md): 4 experts, 2 per token, in both layers.
const std::string kExpertTpRules =
    "[[batch, data], [expert, data], [vocab, model], [heads, model], [mlp, model], [embed, null], [seq, null], [kv, null]]";
const SampledRun& experts_sampled_run() {
  static SampledRun run(", arch: llama, n_kv_head: 2, tie_embeddings: false, moe: {num_experts: 4, num_experts_per_tok: 2, "
                        "moe_intermediate_size: 32, norm_topk_prob: true}",
                        kExpertTpRules);
  return run;
}

// stdout only: run_process interleaves stderr, so the sampling runs write the text to a file.
std::string text_of(const SampledRun& run, const std::vector<std::string>& args, const std::string& name) {
  const std::string out = run.dir.file(name);
  auto r = run.sample(with(args, {"--text-out", out}));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return read_file(out);
}

}  // namespace

TEST_CASE("sample: the same seed prints byte-identical text on [1], [2,2] and FSDP-4") {
  const auto& run = sampled_run();
  const std::vector<std::string> args{"--prompt", "the ", "--tokens", "40", "--temperature", "1.0", "--seed", "7"};
  const std::string one = text_of(run, args, "one.txt");
  CHECK(one.rfind("the ", 0) == 0);
  CHECK(one.size() == std::string("the ").size() + 40 + 1);  // char vocabulary: a byte per token here, + newline
  const std::string tp = text_of(run, with(args, mesh_args(TestMesh{"", "[2,2]", "[data,model]", kTpRules})), "tp.txt");
  const std::string fsdp4 = text_of(run, with(args, {"--set", "mesh.shape=[4]", "--set", "mesh.axes=[fsdp]", "--set",
                                                     "sharding_rules=" + test_mesh("fsdp-8").rules}),
                                    "fsdp4.txt");
  CHECK(tp == one);
  CHECK(fsdp4 == one);
  // Another seed gives another text (the draw really depends on it).
  std::vector<std::string> other_seed = args;
  other_seed.back() = "8";
  CHECK(text_of(run, other_seed, "seed8.txt") != one);
}

TEST_CASE("sample: a llama (grouped-query attention, untied head) prints the same text on [1], [2,2] and FSDP-4") {
  const auto& run = llama_sampled_run();
  const std::vector<std::string> args{"--prompt", "the ", "--tokens", "40", "--temperature", "1.0", "--seed", "7"};
  const std::string one = text_of(run, args, "one.txt");
  CHECK(one.rfind("the ", 0) == 0);
  CHECK(one.size() == std::string("the ").size() + 40 + 1);
  CHECK(text_of(run, with(args, mesh_args(TestMesh{"", "[2,2]", "[data,model]", kTpRules})), "tp.txt") == one);
  CHECK(text_of(run, with(args, {"--set", "mesh.shape=[4]", "--set", "mesh.axes=[fsdp]", "--set",
                                 "sharding_rules=" + test_mesh("fsdp-8").rules}),
                "fsdp4.txt") == one);
  // The cache is exercised: the whole-context forward at each step gives the same text.
  CHECK(text_of(run, with(args, {"--no-cache"}), "nocache.txt") == one);
}

TEST_CASE("sample: a checkpoint trained on an interleaved pipeline prints the one-process run's text") {
  // The checkpoint's config names runtime.pipeline_schedule: interleaved and virtual_stages: 2;
  // sampling runs unstaged, on any mesh.
  const auto& run = sampled_run();
  auto train_four_blocks = [&](const std::string& name, const std::vector<std::string>& mesh) {
    auto r = run_process(with({binary_path("spmd-train"), "--config", run.config, "--set", "model.n_layer=4", "--set",
                               "checkpoint.dir=" + run.dir.file(name + "-ckpt"), "--set",
                               "output.dir=" + run.dir.file(name + "-out")},
                              mesh),
                         {}, 300);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    return run.dir.file(name + "-ckpt/step_00000040");
  };
  const std::string single = train_four_blocks("single", {});
  const std::string staged = train_four_blocks(
      "interleaved", {"--set", "mesh.shape=[2]", "--set", "mesh.axes=[stage]", "--set",
                      "sharding_rules=[[batch, null], [layers, stage], [vocab, null], [heads, null], [mlp, null], "
                      "[embed, null], [seq, null], [kv, null]]",
                      "--set", "runtime.pipeline_schedule=interleaved", "--set", "runtime.virtual_stages=2", "--set",
                      "train.microbatches=2"});
  const std::string one = sample_text(single, run.dir.file("single.txt"), 40);
  CHECK(one.size() == std::string("the ").size() + 40 + 1);
  CHECK(sample_text(staged, run.dir.file("interleaved.txt"), 40) == one);
}

TEST_CASE("sample: stdout carries the text alone, on one process and under the launcher") {
  const auto& run = sampled_run();
  const std::vector<std::string> args{"--prompt", "a dog", "--tokens", "20", "--seed", "3"};
  const std::string expected = text_of(run, args, "expected.txt");
  for (const std::string& mesh : {"[1,1]", "[2,2]"}) {
    std::string command = binary_path("spmd-train") + " sample --checkpoint " + run.checkpoint +
                          " --prompt 'a dog' --tokens 20 --seed 3 --set mesh.shape=" + mesh + " 2>/dev/null";
    auto r = run_process({"/bin/sh", "-c", command}, {}, 120);
    CHECK_MESSAGE(r.exit_code == 0, r.output);
    CHECK_MESSAGE(r.output == expected, mesh);
  }
}

TEST_CASE("sample: greedy with the KV cache equals the full forward without it, sliding past block_size") {
  const auto& run = sampled_run();
  // block_size is 16: 30 new tokens after a 5-token prompt slide the context 19 times.
  const std::vector<std::string> args{"--prompt", "the c", "--tokens", "30", "--temperature", "0"};
  const std::string cached = text_of(run, args, "cached.txt");
  const std::string full = text_of(run, with(args, {"--no-cache"}), "full.txt");
  CHECK(cached == full);
  CHECK(cached.size() == 5 + 30 + 1);
  // Tensor-parallel heads and vocabulary, cached: the same argmax.
  CHECK(text_of(run, with(args, {"--set", "mesh.shape=[1,2]"}), "tp-cached.txt") == cached);
}

TEST_CASE("sample: the checkpoint carries its tokenizer") {
  const auto& run = sampled_run();
  const std::string copy = run.dir.file("moved");
  std::filesystem::create_directories(copy);
  std::filesystem::copy(run.checkpoint, copy + "/step", std::filesystem::copy_options::recursive);
  // data.train now names nothing: the tokenizer must come from the checkpoint itself.
  auto r = run_process({binary_path("spmd-train"), "sample", "--checkpoint", copy + "/step", "--tokens", "5",
                        "--set", "data.train=/nonexistent/train.bin", "--text-out", copy + "/t.txt"},
                       {}, 60);
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  CHECK(read_file(copy + "/t.txt").size() == 5 + 1);
}

TEST_CASE("sample: bad arguments exit 2 with a message, before any worker starts") {
  const auto& run = sampled_run();
  struct Case {
    std::vector<std::string> argv;
    std::string message;
  };
  const std::string bin = binary_path("spmd-train");
  const std::vector<Case> cases{
      {{bin, "sample"}, "--checkpoint is required"},
      {{bin, "sample", "--checkpoint", run.dir.file("nope")}, "not a complete checkpoint"},
      {{bin, "sample", "--checkpoint", run.checkpoint, "--prompt", "Zebra"}, "--prompt"},
      {{bin, "sample", "--checkpoint", run.checkpoint, "--temperature", "-1"}, "--temperature -1"},
      {{bin, "sample", "--checkpoint", run.checkpoint, "--tokens", "0", "--set", "mesh.shape=[2,2]"}, "--tokens 0"},
  };
  for (const auto& c : cases) {
    auto r = run_process(c.argv, {}, 60);
    CHECK_MESSAGE(r.exit_code == 2, r.output);
    CHECK_MESSAGE(r.output.find(c.message) != std::string::npos, r.output);
    CHECK_MESSAGE(r.output.find("[rank") == std::string::npos, r.output);
  }
  // A checkpoint whose index is damaged.
  const std::string broken = run.dir.file("broken");
  std::filesystem::copy(run.checkpoint, broken, std::filesystem::copy_options::recursive);
  write_file(broken + "/index.json", "{\"format\": ");
  auto r = run_process({bin, "sample", "--checkpoint", broken}, {}, 60);
  CHECK_MESSAGE(r.exit_code == 2, r.output);
  CHECK_MESSAGE(r.output.find("index.json") != std::string::npos, r.output);
}

TEST_CASE("sample: train.sample_every prints samples while training") {
  const auto& run = sampled_run();
  auto r = run_process({binary_path("spmd-train"), "--config", run.config, "--set", "train.steps=4", "--set",
                        "train.sample_every=2", "--set", "checkpoint.dir=", "--set",
                        "output.dir=" + run.dir.file("out-sampling"), "--set", "mesh.shape=[1,2]"},
                       {}, 120);
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  CHECK(r.output.find("sample after step 2:") != std::string::npos);
  CHECK(r.output.find("sample after step 4:") != std::string::npos);
}

TEST_CASE("sample: a byte-level BPE dataset trains, and its checkpoint decodes samples with the BPE") {
  const auto& run = sampled_run();
  auto prep = run_process({binary_path("spmd-prepare"), "--input", run.dir.file("corpus.txt"), "--out",
                           run.dir.file("bpe"), "--vocab", "bpe:60", "--quiet"});
  REQUIRE_MESSAGE(prep.exit_code == 0, prep.output);
  // 256 bytes + 60 merges + <|endoftext|> = 317 ids.
  auto train = run_process({binary_path("spmd-train"), "--config", run.config, "--set", "model.vocab_size=317",
                            "--set", "data.train=" + run.dir.file("bpe/train.bin"), "--set",
                            "data.val=" + run.dir.file("bpe/val.bin"), "--set", "train.steps=6", "--set",
                            "checkpoint.dir=" + run.dir.file("bpe-ckpt"), "--set", "checkpoint.every=6", "--set",
                            "output.dir=" + run.dir.file("bpe-out")},
                           {}, 120);
  REQUIRE_MESSAGE(train.exit_code == 0, train.output);
  const std::string ckpt = run.dir.file("bpe-ckpt/step_00000006");
  CHECK(std::filesystem::exists(ckpt + "/tokenizer/merges.txt"));
  CHECK(std::filesystem::exists(ckpt + "/tokenizer/vocab.json"));
  const std::string out = run.dir.file("bpe-sample.txt");
  auto r = run_process({binary_path("spmd-train"), "sample", "--checkpoint", ckpt, "--prompt", "the cat é",
                        "--tokens", "12", "--temperature", "0", "--text-out", out},
                       {}, 60);
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  const std::string text = read_file(out);
  CHECK(text.rfind("the cat é", 0) == 0);  // a character the corpus never had still encodes (as bytes)
  CHECK(text.size() > std::string("the cat é").size() + 1);
}

TEST_CASE("sample: a mixture of experts prints the same text on [1], with experts over 2 ranks, and with EP x TP") {
  const auto& run = experts_sampled_run();
  const std::vector<std::string> args{"--prompt", "the ", "--tokens", "40", "--temperature", "1.0", "--seed", "7"};
  const std::string one = text_of(run, args, "one.txt");
  CHECK(one.size() == std::string("the ").size() + 40 + 1);
  CHECK(text_of(run, with(args, mesh_args(TestMesh{"", "[2,1]", "[data,model]", kExpertTpRules})), "ep.txt") == one);
  CHECK(text_of(run, with(args, mesh_args(TestMesh{"", "[2,2]", "[data,model]", kExpertTpRules})), "ep-tp.txt") == one);
  CHECK(text_of(run, with(args, {"--no-cache"}), "nocache.txt") == one);
}
