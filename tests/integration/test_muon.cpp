// Muon (train.optimizer muon) as real processes over Gloo: with ns_dtype float32 every layout
// (data parallel, FSDP, tensor parallel, TP with sequence parallelism, DP x TP, FSDP x TP, 3-D data
// x FSDP x TP, pipeline stages, Llama) gives one process's loss and gradient norm to float rounding
// over 20 steps, and a checkpoint
// resumes on another layout; with bfloat16 every layout stays within the tolerance measured here,
// which orthogonalising each shard alone (Megatron's blockwise mode) fails by far. A checkpoint of
// one optimizer is refused by the other.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "training_fixture.h"

using namespace spmd::test;

namespace {
const std::vector<std::string> kMuonF32{"--set", "train.optimizer=muon", "--set", "train.muon.lr=0.02", "--set",
                                        "train.muon.ns_dtype=float32"};
const std::vector<std::string> kMuonBf16{"--set", "train.optimizer=muon", "--set", "train.muon.lr=0.02"};

const std::string kFsdpRules =
    "[[batch, fsdp], [embed, fsdp], [vocab, null], [heads, null], [mlp, null], [seq, null], [kv, null]]";
const std::string kTpSpRules =
    "[[batch, data], [seq, model], [vocab, model], [heads, model], [mlp, model], [embed, null], [kv, null]]";
const std::string kFsdpTpRules =
    "[[batch, fsdp], [embed, fsdp], [vocab, model], [heads, model], [mlp, model], [seq, null], [kv, null]]";

// 20 steps (the tiny run's 12, and its schedule, stretched) for the float32 layouts.
const std::vector<std::string> kMuon20Steps{"--set", "train.steps=20", "--set", "train.decay_steps=20"};

// The layouts under test, at most 4 processes each but the 3-D one (8: run once, in the float32 case).
const std::vector<TestMesh> kMuonMeshes{
    {"dp-2", "[2,1]", "[data,model]", kTpRules},
    {"fsdp-4", "[4]", "[fsdp]", kFsdpRules},
    {"tp-2", "[1,2]", "[data,model]", kTpRules},
    {"tp-sp-2", "[1,2]", "[data,model]", kTpSpRules},
    {"dp-tp-2x2", "[2,2]", "[data,model]", kTpRules},
    {"fsdp-tp-2x2", "[2,2]", "[fsdp,model]", kFsdpTpRules},
    {"stage-2", "[2]", "[stage]", "[[batch, null], [layers, stage], " + kOthers + "]"},
    {"data-stage-2x2", "[2,2]", "[data,stage]", "[[batch, data], [layers, stage], " + kOthers + "]"},
    test_mesh("3d-2x2x2"),  // data x fsdp x model
};

const TestMesh& muon_mesh(const std::string& name) {
  for (const auto& m : kMuonMeshes)
    if (m.name == name) return m;
  throw std::runtime_error("no muon test mesh " + name);
}

std::vector<std::string> muon_layout_args(const TestMesh& mesh) {
  auto args = mesh_args(mesh);
  if (mesh.axes.find("stage") != std::string::npos) args = with(args, {"--set", "train.microbatches=2"});
  return args;
}

// The largest relative difference of the step losses and of the gradient norms.
double muon_curve_gap(const std::string& out, const std::string& reference_out) {
  const Curve a = read_metrics(out + "/metrics.jsonl"), b = read_metrics(reference_out + "/metrics.jsonl");
  const auto na = grad_norms(out), nb = grad_norms(reference_out);
  double gap = max_rel_diff(a, b);
  for (size_t i = 0; i < na.size() && i < nb.size(); ++i) gap = std::max(gap, std::abs(na[i] / nb[i] - 1));
  return gap;
}

// bfloat16's tolerance: the most a layout's curve (loss and gradient norm) moved from one
// process's over the 12 steps, measured over the layouts below (2.4e-4), with room for other
// machines' rounding. Orthogonalising each shard alone moved it 4-5e-2.
constexpr double kMuonBf16Tolerance = 2e-3;
}  // namespace

TEST_CASE("muon: with ns_dtype float32 every layout gives one process's curve over 20 steps") {
  TinyRun run;
  const std::string single = run.dir.file("single");
  const auto f32 = with(kMuonF32, kMuon20Steps);
  const Curve reference = train(run, single, f32);
  REQUIRE(reference.loss.size() == 20);
  CHECK(read_summary(single)["optimizer"] == "muon");
  CHECK(reference.loss.back() < reference.loss.front());  // it learns
  const Curve adamw = train(run, run.dir.file("adamw"), kMuon20Steps);
  CHECK(max_rel_diff(adamw, reference) > 1e-3);  // Muon is another update, not AdamW by another name
  const double all_flops = read_summary(single)["muon_newton_schulz_flops"].get<double>();
  for (const auto& mesh : kMuonMeshes) {
    CAPTURE(mesh.name);
    const std::string out = run.dir.file(mesh.name);
    const Curve curve = train(run, out, with(muon_layout_args(mesh), f32));
    check_same_curve(curve, reference, kFloatRounding);
    const auto norms = grad_norms(out), want = grad_norms(single);
    REQUIRE(norms.size() == want.size());  // a short run fails here, not past the end of its norms
    for (size_t i = 0; i < want.size(); ++i) CHECK(std::abs(norms[i] / want[i] - 1) <= kFloatRounding);
    // The owners divide the Newton-Schulz work: rank 0 runs a share of it.
    const double flops = read_summary(out)["muon_newton_schulz_flops"].get<double>();
    CHECK(flops <= 0.5 * all_flops);
    MESSAGE(mesh.name << ": loss and gradient norm within " << muon_curve_gap(out, single)
                      << " of one process; rank 0 runs " << flops / all_flops << " of the Newton-Schulz flops");
  }
}

TEST_CASE("muon: Llama's matrices (grouped key/value heads) on tensor parallel and FSDP give one process's curve") {
  TinyRun run;
  const auto llama = with(kTinyLlama, kMuonF32);
  const Curve reference = train(run, run.dir.file("single"), llama);
  for (const std::string name : {"tp-2", "fsdp-tp-2x2"}) {
    CAPTURE(name);
    check_same_curve(train(run, run.dir.file(name), with(mesh_args(muon_mesh(name)), llama)), reference, kFloatRounding);
  }
}

TEST_CASE("muon: checkpoints carry the momentum and resume on another layout") {
  TinyRun run;
  auto ckpt = [&](const std::string& dir, int steps) {
    return with(kMuonF32, {"--set", "checkpoint.dir=" + run.dir.file(dir), "--set", "checkpoint.every=6", "--set",
                           "train.steps=" + std::to_string(steps), "--set", "train.eval_every=0"});
  };
  const Curve whole = train(run, run.dir.file("whole"), ckpt("ck-whole", 12));
  train(run, run.dir.file("first"), with(mesh_args(muon_mesh("fsdp-tp-2x2")), ckpt("ck-first", 6)));
  const std::string step6 = run.dir.file("ck-first/step_00000006");
  for (const std::string name : {"single", "tp-sp-2", "stage-2", "fsdp-4"}) {
    CAPTURE(name);
    const auto mesh = name == "single" ? std::vector<std::string>{} : muon_layout_args(muon_mesh(name));
    const Curve c = train(run, run.dir.file("from-" + name), with(mesh, with(ckpt("ck-" + name, 12), {"--resume", step6})));
    REQUIRE(c.loss.size() == 6);
    check_same_curve(c, tail(whole, 6), kFloatRounding);
  }
  // The other optimizer cannot take over the state: exit 2, saying which it was.
  const auto r = run_train(run, run.dir.file("adamw-resume"),
                           {"--set", "checkpoint.dir=" + run.dir.file("ck-adamw"), "--set", "train.steps=12",
                            "--resume", step6});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find("train.optimizer muon, but the config says adamw") != std::string::npos, r.output);
}

TEST_CASE("muon: with ns_dtype bfloat16 every layout stays within the measured tolerance, and per-shard orthogonalisation does not") {
  TinyRun run;
  const std::string single = run.dir.file("single");
  train(run, single, kMuonBf16);
  double worst = 0;
  for (const std::string name : {"fsdp-4", "tp-2", "dp-tp-2x2"}) {
    CAPTURE(name);
    const std::string out = run.dir.file(name);
    train(run, out, with(muon_layout_args(muon_mesh(name)), kMuonBf16));
    worst = std::max(worst, muon_curve_gap(out, single));
  }
  MESSAGE("bfloat16 Newton-Schulz: every layout within " << worst << " of one process (tolerance "
                                                         << kMuonBf16Tolerance << ")");
  CHECK(worst <= kMuonBf16Tolerance);
  // Megatron's blockwise mode: each rank orthogonalises its own block.
  for (const std::string name : {"fsdp-4", "tp-2"}) {
    CAPTURE(name);
    const std::string out = run.dir.file("per-shard-" + name);
    const auto r = run_train(run, out, with(muon_layout_args(muon_mesh(name)), kMuonBf16), "muon_per_shard");
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    const double gap = muon_curve_gap(out, single);
    MESSAGE("per-shard orthogonalisation on " << name << ": " << gap << " from one process");
    CHECK(gap > 5 * kMuonBf16Tolerance);
  }
}
