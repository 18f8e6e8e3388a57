// train.init_from as real processes: our export loads back bit for bit onto other meshes (pipeline
// stages with TP and vocab padding, FSDP), a model config that does not match stops in the launcher
// with exit 2 before any worker starts, and --resume wins over init_from.
#include <cstring>
#include <filesystem>

#include "hf/name_map.h"
#include "ckpt/safetensors.h"
#include "model/params.h"

#include "doctest_check.h"

#include "training_fixture.h"

using namespace spmd::test;
namespace fs = std::filesystem;

namespace {
const std::string kPipelineTpRules =
    "[[batch, null], [layers, stage], [embed, null], [vocab, model], [heads, model], [mlp, model], [seq, null], "
    "[kv, null]]";

// Pipeline stages with TP (vocab_size 75 pads to 76 over `model`; each stage skips the other's
// blocks), and FSDP (every dim of width `embed` split).
const std::vector<TestMesh> kImportMeshes{
    {"stage-model-2x2", "[2,2]", "[stage,model]", kPipelineTpRules},
    {"fsdp-2", "[2]", "[fsdp]", test_mesh("fsdp-8").rules},
};

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

spmd::ModelConfig tiny_model() {
  spmd::ModelConfig m;
  m.vocab_size = 75, m.block_size = 16, m.n_layer = 2, m.n_head = 8, m.n_embd = 32;
  return m;
}

// Every parameter dumped by the dump_init hook (our global shapes, padding trimmed) has exactly
// the bytes of its tensor in the Hugging Face file.
void check_dump_equals_file(const std::string& dump_dir, const spmd::SafetensorsFile& file) {
  for (const auto& info : spmd::param_table(tiny_model(), tiny_model().vocab_size)) {
    CAPTURE(info.name);
    const std::string name = spmd::hf_name(spmd::gpt2_hf_map(), info.name);
    const auto& e = file.entries().at(name);
    const std::string dumped = read_file(dump_dir + "/" + info.name + ".f32");
    REQUIRE(dumped.size() == e.end - e.begin);
    CHECK(std::memcmp(dumped.data(), file.bytes(name), dumped.size()) == 0);
  }
}
}  // namespace

TEST_CASE("hf import: our export loads back bit for bit on pipeline+TP and FSDP meshes") {
  TinyRun run;
  const std::vector<std::string> base{"--set", "model.vocab_size=75", "--set", "train.eval_every=0", "--set",
                                      "train.microbatches=2"};  // two for the pipeline's two stages
  const std::string ck = run.dir.file("ck");
  train(run, run.dir.file("o"), concat(base, {"--set", "train.steps=2", "--set", "checkpoint.dir=" + ck}));
  const std::string exported = run.dir.file("gpt2.safetensors");
  auto ex = run_process({binary_path("spmd-train"), "export", "--checkpoint", ck + "/step_00000002", "--out", exported});
  REQUIRE_MESSAGE(ex.exit_code == 0, ex.output);
  const spmd::SafetensorsFile file(exported);

  for (const auto& mesh : kImportMeshes) {
    CAPTURE(mesh.name);
    const std::string dump = run.dir.file("dump-" + mesh.name);
    auto r = run_train(run, run.dir.file("out-" + mesh.name),
                       concat(concat(base, mesh_args(mesh)), {"--set", "train.init_from=" + exported, "--set",
                                                              "train.steps=1"}),
                       "dump_init=" + dump);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    CHECK(r.output.find("initialized from Hugging Face GPT-2 checkpoint " + exported) != std::string::npos);
    check_dump_equals_file(dump, file);
  }

  {  // A model config that does not match exits 2 in the launcher, before any worker starts.
    const std::string out = run.dir.file("out-bad");
    auto r = run_train(run, out,
                       concat(concat(base, mesh_args(kImportMeshes[0])),
                              {"--set", "train.init_from=" + exported, "--set", "model.n_embd=64"}));
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(exported + ": tensor 'transformer.wte.weight' has shape [75, 32] but the model config "
                        "needs [75, 64] (check model.n_embd)") != std::string::npos);
    CHECK(r.output.find("spmd-train: mesh") == std::string::npos);  // no worker said anything
    CHECK_FALSE(fs::exists(out));                                   // nor created the output directory
  }
  {  // --resume wins over train.init_from, which is then not even opened.
    auto r = run_train(run, run.dir.file("out-resume"),
                       concat(base, {"--set", "train.steps=3", "--set", "checkpoint.dir=" + ck, "--set",
                                     "train.init_from=" + run.dir.file("missing"), "--resume"}));
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    CHECK(r.output.find("resumed from " + ck + "/step_00000002 at step 2") != std::string::npos);
    CHECK(r.output.find("initialized from") == std::string::npos);
  }
}
