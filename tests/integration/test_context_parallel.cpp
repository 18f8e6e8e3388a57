// Context parallelism (a [seq, context] rule onto a weight-free mesh axis) as real processes over
// Gloo: cp 2 and 4, alone and beside a data, an FSDP, a tensor-parallel or a pipeline axis, and
// under recomputation, follow the single-process loss curve and gradient norms (dropout 0 and
// 0.1); checkpoints move between a context-parallel mesh and one process both ways; sampling on a
// context-parallel mesh prints the one-process text; spmd-inspect's activations per rank fall with
// the context degree and match what a rank holds; the layouts not built (seq on the pipeline axis,
// context beside sequence parallelism) and a block_size that does not cut into 2 x cp chunks exit
// 2 before launch, naming the keys.
#include <doctest/doctest.h>

#include <cmath>

#include "training_fixture.h"

using namespace spmd::test;

namespace {

// The mesh [cp] (axes [context]) or [2, cp] ([data, context]) with seq on the context axis.
std::vector<std::string> context_parallel(int cp, bool data) {
  const std::string p = std::to_string(cp);
  const TestMesh mesh = data ? TestMesh{"", "[2," + p + "]", "[data,context]", "[[batch, data], [seq, context], " + kOthersButSeq + "]"}
                             : TestMesh{"", "[" + p + "]", "[context]", "[[batch, null], [seq, context], " + kOthersButSeq + "]"};
  return mesh_args(mesh);
}

std::vector<std::string> dropout(double p) { return {"--set", "model.dropout=" + std::to_string(p)}; }

}  // namespace

TEST_CASE("context parallel: cp 2 and 4, alone and with data, FSDP and tensor axes (and all three), match one process") {
  TinyRun run;
  struct Case {
    std::string name;
    std::vector<std::string> mesh;
    int ranks, cp;
  };
  const std::vector<Case> cases{
      {"cp-2", context_parallel(2, false), 2, 2},
      {"data-cp-2x2", context_parallel(2, true), 4, 2},
      {"cp-4", context_parallel(4, false), 4, 4},
      {"fsdp-cp-2x2",
       mesh_args({"", "[2,2]", "[fsdp,context]",
                  "[[batch, fsdp], [embed, fsdp], [seq, context], [vocab, null], [heads, null], [mlp, null], [kv, null]]"}),
       4, 2},
      {"cp-tp-2x2",
       mesh_args({"", "[2,2]", "[context,model]",
                  "[[batch, null], [seq, context], [heads, model], [mlp, model], [vocab, model], [embed, null], [kv, null]]"}),
       4, 2},
      {"data-cp-tp-2x2x2",
       mesh_args({"", "[2,2,2]", "[data,context,model]",
                  "[[batch, data], [seq, context], [heads, model], [mlp, model], [vocab, model], [embed, null], [kv, null]]"}),
       8, 2},
  };
  for (double p : {0.0, 0.1}) {
    CAPTURE(p);
    const std::string single = run.dir.file("single-" + std::to_string(p));
    const Curve reference = train(run, single, dropout(p));
    REQUIRE(reference.loss.size() == 12);
    for (const Case& c : cases) {
      CAPTURE(c.name);
      const std::string out = run.dir.file(c.name + "-" + std::to_string(p));
      const Curve curve = train(run, out, with(dropout(p), c.mesh));
      check_same_curve(curve, reference, kFloatRounding);
      check_same_grad_norms(out, grad_norms(single), kFloatRounding);
      const auto summary = read_summary(out);
      CHECK(summary["ranks"].get<int>() == c.ranks);
      CHECK(summary["context_parallel"].get<int>() == c.cp);
      CHECK(summary["context_exchange"] == "all_gather");
      CHECK(summary["ring_attention_forwards"].get<int64_t>() == 0);
      MESSAGE(c.name << " dropout " << p << ": largest relative step-loss difference " << max_rel_diff(curve, reference));
    }
  }
}

TEST_CASE("context parallel: recomputation (full, selective) and microbatches on data x context match one process") {
  TinyRun run;
  const Curve reference = train(run, run.dir.file("single"), dropout(0.1));
  const std::vector<std::vector<std::string>> variants{
      {"--set", "runtime.remat=full"}, {"--set", "runtime.remat=selective"}, {"--set", "train.microbatches=2"}};
  for (const auto& variant : variants) {
    CAPTURE(variant[1]);
    const Curve curve =
        train(run, run.dir.file("variant-" + variant[1]), with(with(dropout(0.1), context_parallel(2, true)), variant));
    check_same_curve(curve, reference, kFloatRounding);
  }
}

TEST_CASE("context parallel: context x stage pipelines (1F1B and interleaved) match the single-process run") {
  TinyRun run;
  const std::vector<std::string> four_blocks = with(dropout(0.1), {"--set", "model.n_layer=4"});
  const Curve reference = train(run, run.dir.file("single"), four_blocks);
  const auto pipeline = mesh_args({"", "[2,2]", "[context,stage]", "[[batch, null], [seq, context], [layers, stage], " + kOthersButSeq + "]"});
  for (const std::string schedule : {"1f1b", "interleaved"}) {
    CAPTURE(schedule);
    const std::string chunks = schedule == "interleaved" ? "2" : "1";
    const std::string out = run.dir.file(schedule);
    const Curve curve = train(run, out, with(with(four_blocks, pipeline),
                                             {"--set", "train.microbatches=2", "--set", "runtime.pipeline_schedule=" + schedule,
                                              "--set", "runtime.virtual_stages=" + chunks}));
    check_same_curve(curve, reference, kFloatRounding);
    check_same_grad_norms(out, grad_norms(run.dir.file("single")), kFloatRounding);
    CHECK(read_summary(out)["pipeline_stages"].get<int>() == 2);
  }
}

TEST_CASE("context parallel: checkpoints move between a context-parallel mesh and one process, both ways") {
  TinyRun run;
  auto ckpt = [&](const std::string& dir, int steps) {
    return with(dropout(0.1), {"--set", "checkpoint.dir=" + run.dir.file(dir), "--set", "checkpoint.every=4", "--set",
                               "train.steps=" + std::to_string(steps), "--set", "train.decay_steps=8", "--set",
                               "train.eval_every=0"});
  };
  const auto cp = context_parallel(2, true);
  const Curve whole = train(run, run.dir.file("whole"), ckpt("ck-whole", 8));  // one process, 8 steps
  Curve tail;
  tail.loss.assign(whole.loss.begin() + 4, whole.loss.end());
  // Saved context-parallel at step 4, resumed on one process.
  train(run, run.dir.file("cp-first"), with(cp, ckpt("ck-cp", 4)));
  const Curve from_cp = train(run, run.dir.file("from-cp"),
                              with(ckpt("ck-single", 8), {"--resume", run.dir.file("ck-cp/step_00000004")}));
  REQUIRE(from_cp.loss.size() == 4);
  check_same_curve(from_cp, tail, kFloatRounding);
  // Saved on one process at step 4 (the whole run's checkpoint), resumed context-parallel.
  const Curve from_single = train(
      run, run.dir.file("from-single"),
      with(cp, with(ckpt("ck-from-single", 8), {"--resume", run.dir.file("ck-whole/step_00000004")})));
  REQUIRE(from_single.loss.size() == 4);
  check_same_curve(from_single, tail, kFloatRounding);
}

TEST_CASE("context parallel: sampling from a context-parallel checkpoint on its mesh prints the one-process text") {
  // A prepared char corpus, so that the checkpoint carries its tokenizer.
  TinyRun run;
  const std::vector<std::string> corpus = prepared_data(prepare_char_corpus(run.dir, 300, "data"), 20);
  auto trained = [&](const std::string& name, const std::vector<std::string>& mesh) {
    train(run, run.dir.file(name),
          with(with(corpus, mesh), {"--set", "checkpoint.dir=" + run.dir.file(name + "-ckpt"), "--set",
                                    "checkpoint.every=12"}));
    return run.dir.file(name + "-ckpt/step_00000012");
  };
  // The context-parallel checkpoint's config names the [2] context mesh: sampling runs on it.
  const std::string one = sample_text(trained("single", {}), run.dir.file("single.txt"), 24);
  CHECK(one.size() == std::string("the ").size() + 24 + 1);
  CHECK(sample_text(trained("cp", context_parallel(2, false)), run.dir.file("cp.txt"), 24) == one);
}

TEST_CASE("context parallel by ring: cp 2 and 4, with data, tensor and pipeline axes and recomputation, match one process") {
  TinyRun run;
  const std::vector<std::string> ring{"--set", "runtime.context_exchange=ring"};
  const std::vector<std::string> four_blocks{"--set", "model.n_layer=4"};
  struct Case {
    std::string name;
    std::vector<std::string> args;
    bool four_blocks = false;
  };
  const std::vector<Case> cases{
      {"cp-2", context_parallel(2, false)},
      {"cp-4", context_parallel(4, false)},
      {"data-cp-2x2", context_parallel(2, true)},
      {"cp-tp-2x2",
       mesh_args({"", "[2,2]", "[context,model]",
                  "[[batch, null], [seq, context], [heads, model], [mlp, model], [vocab, model], [embed, null], [kv, null]]"})},
      {"cp-2-remat-full", with(context_parallel(2, false), {"--set", "runtime.remat=full"})},
      {"cp-2-remat-selective-M2", with(context_parallel(2, false), {"--set", "runtime.remat=selective", "--set", "train.microbatches=2"})},
      {"cp-stage-2x2-1f1b",
       with(mesh_args({"", "[2,2]", "[context,stage]", "[[batch, null], [seq, context], [layers, stage], " + kOthersButSeq + "]"}),
            {"--set", "train.microbatches=2"}),
       true},
  };
  for (double p : {0.0, 0.1}) {
    CAPTURE(p);
    for (bool deep : {false, true}) {
      const std::string single = run.dir.file("single-" + std::to_string(p) + (deep ? "-4" : "-2"));
      const Curve reference = train(run, single, deep ? with(dropout(p), four_blocks) : dropout(p));
      for (const Case& c : cases) {
        if (c.four_blocks != deep) continue;
        CAPTURE(c.name);
        const std::string out = run.dir.file("ring-" + c.name + "-" + std::to_string(p));
        const Curve curve = train(run, out, with(with(deep ? with(dropout(p), four_blocks) : dropout(p), c.args), ring));
        check_same_curve(curve, reference, kFloatRounding);
        check_same_grad_norms(out, grad_norms(single), kFloatRounding);
        // The ring ran: every attention forward of every step sent keys and values around.
        const auto summary = read_summary(out);
        CHECK(summary["context_exchange"] == "ring");
        CHECK(summary["ring_attention_forwards"].get<int64_t>() > 0);
        MESSAGE("ring " << c.name << " dropout " << p << ": largest relative step-loss difference "
                        << max_rel_diff(curve, reference));
      }
    }
  }
}

TEST_CASE("context parallel by ring: spmd-inspect's activations match a ring run and fall below the all-gather's") {
  TinyRun run;
  const std::vector<std::string> bigger{"--set", "model.block_size=64", "--set", "model.n_embd=64", "--set",
                                        "model.n_head=4", "--set", "train.steps=2", "--set", "train.decay_steps=2",
                                        "--set", "train.warmup_steps=1", "--set", "train.eval_every=0"};
  for (int cp : {2, 4}) {
    CAPTURE(cp);
    const auto gather_args = with(bigger, context_parallel(cp, false));
    const auto ring_args = with(gather_args, {"--set", "runtime.context_exchange=ring"});
    const double gathered = inspect_json_of(run.config, gather_args)["totals"]["per_device"]["activations"].get<double>();
    const double estimate = inspect_json_of(run.config, ring_args)["totals"]["per_device"]["activations"].get<double>();
    CHECK(estimate < gathered * 0.75);  // no (T/cp, T) probabilities, no gathered keys and values
    const std::string out = run.dir.file("ring-memory-" + std::to_string(cp));
    train(run, out, ring_args);
    const double measured = read_summary(out)["graph_bytes"].get<double>();
    MESSAGE("ring cp " << cp << ": activations estimate " << estimate << " bytes (all-gather " << gathered
                       << "), measured " << measured);
    REQUIRE(measured > 0);
    CHECK(std::abs(estimate - measured) <= measured / 4);
  }
}

TEST_CASE("context parallel: spmd-inspect's activations per rank fall with the context degree and match a run") {
  // Wider and longer than the tiny model so that activations dominate; the last of 2 steps is measured.
  TinyRun run;
  const std::vector<std::string> bigger{"--set", "model.block_size=64", "--set", "model.n_embd=64", "--set",
                                        "model.n_head=4", "--set", "train.steps=2", "--set", "train.decay_steps=2",
                                        "--set", "train.warmup_steps=1", "--set", "train.eval_every=0"};
  double previous = 0;
  for (int cp : {1, 2, 4}) {
    CAPTURE(cp);
    const auto args = with(bigger, context_parallel(cp, false));
    const auto memory = inspect_json_of(run.config, args)["totals"]["per_device"];
    const double estimate = memory["activations"].get<double>();
    CHECK(memory["context_parallel_degree"].get<int>() == cp);
    if (cp > 1) CHECK(estimate < previous * 0.75);  // the attention's (T/cp, T) keeps it above 1/cp
    previous = estimate;
    const std::string out = run.dir.file("memory-" + std::to_string(cp));
    train(run, out, args);
    const double measured = read_summary(out)["graph_bytes"].get<double>();
    MESSAGE("cp " << cp << ": activations estimate " << estimate << " bytes, measured " << measured);
    REQUIRE(measured > 0);
    CHECK(std::abs(estimate - measured) <= measured / 4);
  }
  // The shipped example (docs/context-parallel.md) inspects as 2-way data x 2-way context.
  const auto shipped = inspect_json_of(source_path("configs/context-2x2.yaml"));
  CHECK(shipped["data_parallel_size"].get<int>() == 2);
  CHECK(shipped["totals"]["per_device"]["context_parallel_degree"].get<int>() == 2);
}

TEST_CASE("context parallel: layouts it cannot run exit 2 before launch, naming the keys") {
  TinyRun run;
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> said;
  };
  const std::vector<Case> cases{
      // block_size 12 does not cut into 2 x 4 head-tail chunks.
      {with(context_parallel(4, false), {"--set", "model.block_size=12"}),
       {"model.block_size = 12", "2 x 4 head-tail chunks", "[seq, context]", "multiple of 8"}},
      // seq over the weight-free context axis and the tensor-parallel model axis at once.
      {mesh_args(TestMesh{"", "[2,2]", "[context,model]",
                          "[[batch, null], [seq, [context, model]], [heads, model], [mlp, model], [vocab, model], "
                          "[embed, null], [kv, null]]"}),
       {"weight-free axes [context]", "tensor-parallel axes [model]", "at once"}},
      // seq on the pipeline's own axis.
      {with(mesh_args(TestMesh{"", "[2]", "[stage]", "[[batch, null], [seq, stage], [layers, stage], " + kOthersButSeq + "]"}),
            {"--set", "train.microbatches=2"}),
       {"[seq, stage]", "[layers, stage]", "its own mesh axis"}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.said.front());
    check_refused(run, c.args, c.said);
  }
}
