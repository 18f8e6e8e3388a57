// Activation recomputation as real processes: runtime.remat full and selective reproduce the
// losses of no recomputation exactly (dropout masks are pure functions of their indices) on one
// process, DP x TP and FSDP, and full recomputation holds far fewer bytes for backward.
#include <doctest/doctest.h>

#include "training_fixture.h"

using namespace spmd::test;

TEST_CASE("remat: full and selective recomputation give exactly the losses of none, on [1], [2,2] and FSDP-4") {
  TinyRun run;
  const std::vector<std::pair<std::string, std::vector<std::string>>> meshes{
      {"single", {}},
      {"dp-tp-2x2", with(mesh_args(test_mesh("hybrid-4x2")), {"--set", "mesh.shape=[2,2]"})},
      {"fsdp-4", with(mesh_args(test_mesh("fsdp-8")), {"--set", "mesh.shape=[4]"})}};
  for (const auto& [name, mesh] : meshes) {
    CAPTURE(name);
    auto args = with(mesh, {"--set", "model.dropout=0.1"});
    const std::string none_out = run.dir.file(name + "-none");
    const Curve none = train(run, none_out, with(args, {"--set", "runtime.remat=none"}));
    const double none_bytes = read_summary(none_out)["graph_bytes"].get<double>();
    for (const std::string remat : {"full", "selective"}) {
      CAPTURE(remat);
      const std::string out = run.dir.file(name + "-" + remat);
      const Curve c = train(run, out, with(args, {"--set", "runtime.remat=" + remat}));
      REQUIRE(c.loss.size() == none.loss.size());
      for (size_t i = 0; i < c.loss.size(); ++i) CHECK_MESSAGE(c.loss[i] == none.loss[i], "logged loss " << i);
      CHECK(c.val_loss == none.val_loss);
      const double bytes = read_summary(out)["graph_bytes"].get<double>();
      MESSAGE(name << ": bytes held for backward, remat none " << none_bytes << ", " << remat << " " << bytes);
      CHECK(bytes < none_bytes);
      if (remat == "full") CHECK(bytes * 3 < none_bytes);
    }
  }
}

TEST_CASE("remat: recomputation composes with pipeline stages (exact losses)") {
  TinyRun run;
  const auto pipe = std::vector<std::string>{
      "--set", "mesh.shape=[2]", "--set", "mesh.axes=[stage]", "--set",
      "sharding_rules=[[batch, null], [layers, stage], [vocab, null], [heads, null], [mlp, null], [embed, null], "
      "[seq, null], [kv, null]]",
      "--set", "train.microbatches=2", "--set", "model.dropout=0.1"};
  const Curve none = train(run, run.dir.file("none"), with(pipe, {"--set", "runtime.remat=none"}));
  const Curve full = train(run, run.dir.file("full"), with(pipe, {"--set", "runtime.remat=full"}));
  REQUIRE(full.loss.size() == none.loss.size());
  for (size_t i = 0; i < full.loss.size(); ++i) CHECK(full.loss[i] == none.loss[i]);
}

TEST_CASE("sequence parallelism: [seq, model] on [2,4] and [1,8] matches one process") {
  // The residual stream between the tensor-parallel layers is split along the sequence:
  // all-gather before each column-parallel layer, reduce-scatter after each row-parallel one.
  TinyRun run;
  const std::vector<std::string> dropout{"--set", "model.dropout=0.1"};
  const Curve reference = train(run, run.dir.file("single"), dropout);
  const std::string sp_rules =
      "[[batch, data], [seq, model], [vocab, model], [heads, model], [mlp, model], [embed, null], [kv, null]]";
  for (const std::string shape : {"[2,4]", "[1,8]"}) {
    CAPTURE(shape);
    const std::string out = run.dir.file("sp-" + shape);
    const Curve c = train(run, out, with(dropout, {"--set", "mesh.shape=" + shape, "--set", "mesh.axes=[data,model]",
                                                   "--set", "sharding_rules=" + sp_rules}));
    check_same_curve(c, reference, kFloatRounding);
  }
  // On [1,8] the split stream holds less for backward than plain tensor parallelism, which keeps
  // the LayerNorm, dropout and residual tensors whole on every rank.
  auto graph_bytes = [&](const std::string& name, const std::string& rules) {
    const std::string out = run.dir.file(name);
    train(run, out, {"--set", "mesh.shape=[1,8]", "--set", "mesh.axes=[data,model]", "--set", "sharding_rules=" + rules,
                     "--set", "train.steps=2", "--set", "train.eval_every=0"});
    return read_summary(out)["graph_bytes"].get<double>();
  };
  const double sp = graph_bytes("sp-bytes", sp_rules);
  const double tp = graph_bytes("tp-bytes", "[[batch, data], [seq, null], [vocab, model], [heads, model], [mlp, model], "
                                            "[embed, null], [kv, null]]");
  MESSAGE("[1,8] bytes held for backward: sequence parallel " << sp << ", tensor parallel " << tp);
  CHECK(sp < tp);
}

// seq on an axis that splits no weight is context parallelism (test_context_parallel.cpp); on a
// tensor-parallel axis, every tensor-parallel layer must split over it.
TEST_CASE("sequence parallelism: seq on a batch axis or on an axis that splits only some layers is refused") {
  TinyRun run;
  auto refused = [&](const std::string& rules, const std::string& want) {
    const auto r = run_train(run, run.dir.file("bad"), {"--set", "mesh.shape=[2,2]", "--set", "mesh.axes=[data,model]",
                                                         "--set", "sharding_rules=" + rules});
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find(want) != std::string::npos, r.output);
  };
  refused("[[batch, data], [seq, data], [vocab, model], [heads, model], [mlp, model], [embed, null], [kv, null]]",
          "already shards the batch");
  refused("[[batch, data], [seq, model], [vocab, null], [heads, model], [mlp, null], [embed, null], [kv, null]]",
          "map heads, mlp and vocab to model");
}
