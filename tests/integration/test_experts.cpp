// Routed experts (docs/experts.md) on every layout the rules give: expert parallelism on the data
// axis and on an axis of its own, with tensor parallelism within each expert (and sequence
// parallelism), FSDP, two pipeline stages, context parallelism (all-gather and ring),
// recomputation and microbatches reproduce one process's losses, balancing losses and gradient
// norms to float rounding; a checkpoint resumes on another layout; layouts that cannot hold the
// experts exit 2 before launch, naming the key.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "training_fixture.h"

using namespace spmd::test;

namespace {

// The tiny Llama with 4 experts, 2 per token, in both layers (6 steps, one evaluation).
const std::vector<std::string> kTinyMoe = with(
    kTinyLlama, {"--set", "model.moe.num_experts=4", "--set", "model.moe.num_experts_per_tok=2", "--set",
                 "model.moe.moe_intermediate_size=32", "--set", "model.moe.router_aux_loss_coef=0.02", "--set",
                 "train.steps=6", "--set", "train.eval_every=6", "--set",
                 "sharding_rules=[[batch, data], [vocab, model], [heads, model], [mlp, model], [embed, null], "
                 "[seq, null], [kv, null], [expert, null]]"});

// The rules for the axes a case leaves unsharded, after its own.
std::string expert_rules(const std::string& own) {
  std::string r = "[" + own;
  for (const char* name : {"batch", "seq", "vocab", "heads", "mlp", "embed", "kv", "expert"})
    if (own.find(std::string("[") + name + ",") == std::string::npos) r += std::string(", [") + name + ", null]";
  return r + "]";
}

struct ExpertRun {
  Curve curve;
  std::vector<double> aux, grad_norm;
};

ExpertRun train_moe(const TinyRun& run, const std::string& out, const std::vector<std::string>& args) {
  ExpertRun r{train(run, out, args), {}, grad_norms(out)};
  std::ifstream in(out + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    REQUIRE_MESSAGE(j.contains("aux_loss"), line);
    REQUIRE(j.contains("experts/layer1/load_max_over_mean"));
    r.aux.push_back(j["aux_loss"].get<double>());
  }
  return r;
}

void check_same_expert_run(const ExpertRun& got, const ExpertRun& want) {
  check_same_curve(got.curve, want.curve, kFloatRounding);
  REQUIRE(got.aux.size() == want.aux.size());
  for (size_t i = 0; i < want.aux.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got.aux[i] - want.aux[i]) <= kFloatRounding * std::abs(want.aux[i]));
    CHECK(std::abs(got.grad_norm[i] - want.grad_norm[i]) <= kFloatRounding * want.grad_norm[i]);
  }
}

struct ExpertCase {
  std::string name;
  std::vector<std::string> args;
};

void check_expert_cases(const std::vector<std::string>& model, const std::vector<ExpertCase>& cases) {
  TinyRun run;
  const auto base = with(kTinyMoe, model);
  const ExpertRun reference = train_moe(run, run.dir.file("single"), base);
  REQUIRE(reference.curve.loss.size() == 6);
  CHECK(reference.curve.loss.back() < reference.curve.loss.front());  // it learns
  CHECK(reference.aux.front() >= 1.0 - 1e-9);  // E * sum f P is at least 1 (1: perfectly balanced)
  for (const auto& c : cases) {
    CAPTURE(c.name);
    check_same_expert_run(train_moe(run, run.dir.file(c.name), with(base, c.args)), reference);
  }
}

}  // namespace

TEST_CASE("experts: expert parallelism on the data axis, on its own axis, with FSDP and with remat matches one process") {
  check_expert_cases({}, {
      {"ep-2-data", mesh_args("[2]", "[data]", expert_rules("[batch, data], [expert, data]"))},
      {"ep-2-own-axis-dp-2", mesh_args("[2,2]", "[data,expert]", expert_rules("[batch, [data, expert]], [expert, expert]"))},
      {"ep-2-fsdp", with(mesh_args("[2]", "[data]", expert_rules("[batch, data], [expert, data], [embed, data]")),
                         {"--set", "runtime.remat=full"})},
      {"ep-2-x-fsdp-2", mesh_args("[2,2]", "[data,fsdp]",
                                  expert_rules("[batch, [data, fsdp]], [expert, data], [embed, fsdp]"))},
  });
}

TEST_CASE("experts: expert x tensor parallel (with sequence parallelism) and a shared expert match one process") {
  check_expert_cases({"--set", "model.moe.shared_expert_intermediate_size=24", "--set", "model.moe.norm_topk_prob=true"},
              {
                  {"ep-2-tp-2", mesh_args("[2,2]", "[data,model]",
                                          expert_rules("[batch, data], [expert, data], [vocab, model], [heads, model], [mlp, model]"))},
                  {"ep-2-tp-sp-2", mesh_args("[2,2]", "[data,model]",
                                             expert_rules("[batch, data], [expert, data], [seq, model], [vocab, model], "
                                                   "[heads, model], [mlp, model]"))},
              });
}

TEST_CASE("experts: microbatches and two pipeline stages pool the balancing loss over the whole step") {
  // One forward of the whole batch on one process is the reference: its routing is the step's.
  const std::vector<std::string> two{"--set", "train.microbatches=2"};
  check_expert_cases({}, {
      {"microbatches-2", two},
      {"microbatches-4-remat", {"--set", "train.microbatches=4", "--set", "runtime.remat=full"}},
      {"ep-2-microbatches-2", with(mesh_args("[2]", "[data]", expert_rules("[batch, data], [expert, data]")), two)},
      {"ep-2-stages-2", with(mesh_args("[2,2]", "[data,stage]", expert_rules("[batch, data], [expert, data], [layers, stage]")),
                             two)},
  });
}

TEST_CASE("experts: context parallelism (all-gather and ring) with experts on the data and context axes matches one process") {
  check_expert_cases({}, {
      {"ep-data-cp-2-ring", with(mesh_args("[2,2]", "[data,context]", expert_rules("[batch, data], [seq, context], [expert, data]")),
                                 {"--set", "runtime.context_exchange=ring"})},
      {"ep-context-2", mesh_args("[2]", "[context]", expert_rules("[seq, context], [expert, context]"))},
  });
}

TEST_CASE("experts: a checkpoint of an expert-parallel run resumes on other layouts") {
  TinyRun run;
  auto ckpt = [&](const std::string& dir, int steps) {
    return with(kTinyMoe, {"--set", "checkpoint.dir=" + run.dir.file(dir), "--set", "checkpoint.every=3", "--set",
                           "train.steps=" + std::to_string(steps), "--set", "train.eval_every=0"});
  };
  const Curve whole = train(run, run.dir.file("whole"), ckpt("ck-whole", 6));
  train(run, run.dir.file("first"), with(ckpt("ck-first", 3), mesh_args("[2]", "[data]", expert_rules("[batch, data], [expert, data]"))));
  const std::string step3 = run.dir.file("ck-first/step_00000003");
  for (const auto& [name, mesh] : std::vector<ExpertCase>{
           {"single", mesh_args("[1]", "[data]", expert_rules("[batch, data]"))},
           {"ep-tp", mesh_args("[2,2]", "[data,model]", expert_rules("[batch, data], [expert, data], [mlp, model]"))}}) {
    CAPTURE(name);
    const Curve c = train(run, run.dir.file("from-" + name), with(with(ckpt("ck-" + name, 6), mesh), {"--resume", step3}));
    REQUIRE(c.loss.size() == 3);
    check_same_curve(c, tail(whole, 3), kFloatRounding);
  }
}

TEST_CASE("experts: layouts and settings that cannot hold the experts exit 2 before launch, naming the key") {
  TinyRun run;
  // 4 experts over 8... the data axis of 3 does not divide them.
  auto r = run_train(run, run.dir.file("indivisible"),
                     with(kTinyMoe, with(mesh_args("[3]", "[data]", expert_rules("[batch, data], [expert, data]")),
                                         {"--set", "data.batch_size=6"})));
  check_failed_with(r, 2, "model.moe.num_experts");
  CHECK_MESSAGE(r.output.find("mesh axis 'data' of size 3") != std::string::npos, r.output);
  r = run_train(run, run.dir.file("top-k"), with(kTinyMoe, {"--set", "model.moe.num_experts_per_tok=5"}));
  check_failed_with(r, 2, "model.moe.num_experts_per_tok");
  // An axis that does not split the tokens.
  r = run_train(run, run.dir.file("replicated-tokens"),
                with(kTinyMoe, mesh_args("[1,2]", "[data,model]", expert_rules("[batch, data], [expert, model]"))));
  check_failed_with(r, 2, "[expert, model]");
}

TEST_CASE("experts: auxiliary-loss-free balancing moves the choice bias the same on every layout") {
  // A large rate so that six steps of bias visibly change the choice; the aux loss off.
  const std::vector<std::string> bias{"--set", "model.moe.expert_bias_update_rate=0.05", "--set",
                                      "model.moe.router_aux_loss_coef=0"};
  TinyRun run;
  const ExpertRun without = train_moe(run, run.dir.file("no-bias"), with(kTinyMoe, {"--set", "model.moe.router_aux_loss_coef=0"}));
  const ExpertRun single = train_moe(run, run.dir.file("single"), with(kTinyMoe, bias));
  CHECK(max_rel_diff(single.curve, without.curve) > 1e-4);  // the bias changed what the experts saw
  for (const auto& [name, args] : std::vector<ExpertCase>{
           {"ep-2-microbatches", with(mesh_args("[2]", "[data]", expert_rules("[batch, data], [expert, data]")),
                                      {"--set", "train.microbatches=2"})},
           {"ep-2-stages-2", with(mesh_args("[2,2]", "[data,stage]", expert_rules("[batch, data], [expert, data], [layers, stage]")),
                                  {"--set", "train.microbatches=2"})}}) {
    CAPTURE(name);
    check_same_expert_run(train_moe(run, run.dir.file(name), with(with(kTinyMoe, bias), args)), single);
  }
}
