// The Llama family on the rules GPT-2's meshes use: every mesh reproduces one process to float
// rounding (data, FSDP, tensor + sequence parallel, 1F1B and interleaved pipelines, context
// parallelism all-gathered and by ring, recomputation, hybrids), tied and untied heads, and key/value
// heads that do not divide over their axis exit 2 before launch, naming model.n_kv_head; bf16
// matmuls stay within bf16 rounding of float32 and meshes follow one process in bf16.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "training_fixture.h"

using namespace spmd::test;

namespace {

// Six steps (one evaluation at the end) keep the many runs cheap.
const std::vector<std::string> kShort{"--set", "train.steps=6", "--set", "train.eval_every=6"};

const std::string kSequenceParallel =
    "[[batch, data], [seq, model], [vocab, model], [heads, model], [mlp, model], [embed, null], [kv, null]]";


struct Case {
  std::string name;
  std::vector<std::string> args;
};

// Trains the tiny llama (with `model` on top) on one process, then on each case's mesh.
void check_cases(const std::vector<std::string>& model, const std::vector<Case>& cases) {
  TinyRun run;
  const auto base = with(with(kTinyLlama, kShort), model);
  const Curve reference = train(run, run.dir.file("single"), base);
  REQUIRE(reference.loss.size() == 6);
  CHECK(reference.loss.back() < reference.loss.front());  // it learns
  for (const auto& c : cases) {
    CAPTURE(c.name);
    check_same_curve(train(run, run.dir.file(c.name), with(base, c.args)), reference, kFloatRounding);
  }
}

}  // namespace

TEST_CASE("llama: data, FSDP, tensor + sequence parallel and hybrid meshes, and remat, match one process") {
  check_cases({}, {
      {"dp-2", mesh_args("[2,1]", "[data,model]", kTpRules)},
      {"tp-2", mesh_args("[1,2]", "[data,model]", kTpRules)},
      {"tp-sp-2-selective", with(mesh_args("[1,2]", "[data,model]", kSequenceParallel), {"--set", "runtime.remat=selective"})},
      {"fsdp-4-full", with(mesh_args(test_mesh("fsdp-8")), {"--set", "mesh.shape=[4]", "--set", "runtime.remat=full"})},
      {"3d-2x1x2", with(mesh_args(test_mesh("3d-2x2x2")), {"--set", "mesh.shape=[2,1,2]"})},
  });
}

TEST_CASE("llama: tied head, dropout and microbatches on data x tensor parallel match one process") {
  check_cases({"--set", "model.tie_embeddings=true", "--set", "model.dropout=0.1"},
              {{"dp-tp-2x2-microbatches", with(mesh_args("[2,2]", "[data,model]", kTpRules), {"--set", "train.microbatches=2"})}});
}

TEST_CASE("llama: 1F1B and interleaved pipelines, untied and tied, match one process") {
  const auto stages = mesh_args("[2]", "[stage]", "[[batch, null], [layers, stage], [seq, null], " + kOthersButSeq + "]");
  for (const char* tied : {"false", "true"}) {
    CAPTURE(tied);
    check_cases({"--set", "model.n_layer=4", "--set", std::string("model.tie_embeddings=") + tied},
                {{"1f1b-2", with(stages, {"--set", "train.microbatches=2"})},
                 {"interleaved-2x2", with(stages, {"--set", "runtime.pipeline_schedule=interleaved", "--set",
                                                   "runtime.virtual_stages=2", "--set", "train.microbatches=2"})}});
  }
}

TEST_CASE("llama: context parallelism (all-gather and ring, with data and tensor axes) rotates true positions") {
  const std::string context = "[[batch, null], [seq, context], " + kOthersButSeq + "]";
  check_cases({}, {
      {"cp-2", mesh_args("[2]", "[context]", context)},
      {"cp-4-ring", with(mesh_args("[4]", "[context]", context), {"--set", "runtime.context_exchange=ring"})},
      {"cp-2-tp-2-ring", with(mesh_args("[2,2]", "[context,model]",
                                   "[[batch, null], [seq, context], [vocab, model], [heads, model], [mlp, model], "
                                   "[embed, null], [kv, null]]"),
                              {"--set", "runtime.context_exchange=ring"})},
  });
}

TEST_CASE("llama: bfloat16 matmuls stay within bf16 rounding of float32, and meshes follow one process") {
  // RMSNorm's statistics, the rotary angles and the loss stay float32; q/k/v, attention, gate/up,
  // SwiGLU and down run in bf16. One process in bf16 stays within a few bf16 roundings of fp32;
  // meshes round each row-parallel partial sum to bf16 before the all-reduce (not bit for bit).
  TinyRun run;
  const auto base = with(kTinyLlama, kShort);
  const auto bf16 = with(base, {"--set", "model.matmul_dtype=bfloat16"});
  const Curve fp32 = train(run, run.dir.file("fp32"), base);
  const Curve single = train(run, run.dir.file("bf16-single"), bf16);
  MESSAGE("llama bf16 vs fp32, one process: max relative loss difference " << max_rel_diff(single, fp32));
  check_same_curve(single, fp32, 2e-3);
  CHECK(std::abs(single.loss.back() - fp32.loss.back()) <= 1e-2);
  // Where this CPU does not take bf16 products it keeps float32 (the runtime line says so).
  const bool bf16_here =
      spmd::kernels::matmul_operand_dtype(spmd::MatmulDtype::kBFloat16, c10::Device(c10::kCPU)) == at::kBFloat16;
  if (bf16_here) CHECK(max_rel_diff(single, fp32) > 0);
  else CHECK(max_rel_diff(single, fp32) == 0);  // float32 kept: the same run
  for (const auto& [name, args] : std::vector<Case>{
           {"tp-sp-2", mesh_args("[1,2]", "[data,model]", kSequenceParallel)},
           {"fsdp-2", with(mesh_args(test_mesh("fsdp-8")), {"--set", "mesh.shape=[2]"})}}) {
    CAPTURE(name);
    const Curve curve = train(run, run.dir.file("bf16-" + name), with(bf16, args));
    MESSAGE(name << " vs one process, both bf16: max relative loss difference " << max_rel_diff(curve, single));
    check_same_curve(curve, single, 1e-3);
  }
}

TEST_CASE("llama: key/value heads that do not divide over the tensor axis exit 2 before launch") {
  TinyRun run;
  // 4 query heads over 4 devices, but 2 key/value heads.
  const auto r = run_train(run, run.dir.file("bad"), with(with(kTinyLlama, kShort), mesh_args("[1,4]", "[data,model]", kTpRules)));
  check_failed_with(r, 2, "model.n_kv_head = 2");
  CHECK(r.output.find("h.0.attn.k.weight") != std::string::npos);
  CHECK(r.output.find("mesh axis 'model' of size 4") != std::string::npos);
  CHECK(r.output.find("set model.n_kv_head to 4") != std::string::npos);
}
