// Pipeline stages as real processes over Gloo: every pipeline mesh and both schedules follow
// the single-process loss curve (dropout included), checkpoints move between pipeline and other
// meshes, 1F1B holds fewer activations than GPipe, a lost stage rank stops the job, and configs
// that cannot run exit 2 naming the key.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "training_fixture.h"

using namespace spmd::test;

namespace {
const std::string kTpOthers = "[vocab, model], [heads, model], [mlp, model], [seq, null], [kv, null]";

// The pipeline meshes, each with its `layers` rule.
const std::vector<TestMesh> kPipelineMeshes{
    {"stage-4", "[4]", "[stage]", "[[batch, null], [layers, stage], " + kOthers + "]"},
    {"data-stage-2x4", "[2,4]", "[data,stage]", "[[batch, data], [layers, stage], " + kOthers + "]"},
    {"data-stage-model-2x2x2", "[2,2,2]", "[data,stage,model]",
     "[[batch, data], [layers, stage], [embed, null], " + kTpOthers + "]"},
    {"fsdp-stage-model-2x2x2", "[2,2,2]", "[fsdp,stage,model]",
     "[[batch, fsdp], [embed, fsdp], [layers, stage], " + kTpOthers + "]"},
};

const TestMesh& pipeline_mesh(const std::string& name) {
  for (const auto& m : kPipelineMeshes)
    if (m.name == name) return m;
  throw std::runtime_error("no pipeline mesh " + name);
}

// Four blocks (one per stage on the 4-stage meshes), dropout on.
const std::vector<std::string> kFourBlocks{"--set", "model.n_layer=4", "--set", "model.dropout=0.1"};

std::vector<std::string> pipelined(const TestMesh& mesh, const std::string& schedule, int microbatches) {
  return with(mesh_args(mesh), {"--set", "runtime.pipeline_schedule=" + schedule, "--set",
                                "train.microbatches=" + std::to_string(microbatches)});
}
}  // namespace

TEST_CASE("pipeline: every pipeline mesh and both schedules match the single-process loss curve") {
  TinyRun run;
  const Curve reference = train(run, run.dir.file("single"), kFourBlocks);
  REQUIRE(reference.loss.size() == 12);
  for (const auto& mesh : kPipelineMeshes) {
    for (const std::string schedule : {"1f1b", "gpipe"}) {
      CAPTURE(mesh.name);
      CAPTURE(schedule);
      const std::string out = run.dir.file(mesh.name + "-" + schedule);
      const Curve curve = train(run, out, with(kFourBlocks, pipelined(mesh, schedule, 4)));
      check_same_curve(curve, reference, kFloatRounding);
      const int stages = mesh.shape == "[2,2,2]" ? 2 : 4;
      CHECK(read_summary(out)["pipeline_stages"].get<int>() == stages);
    }
  }
}

TEST_CASE("pipeline: checkpoints move between the pipeline mesh, data parallel and one process") {
  TinyRun run;
  auto ckpt = [&](const std::string& dir, int steps) {
    return with(kFourBlocks, {"--set", "checkpoint.dir=" + run.dir.file(dir), "--set", "checkpoint.every=4", "--set",
                              "train.steps=" + std::to_string(steps), "--set", "train.decay_steps=8", "--set",
                              "train.eval_every=0"});
  };
  const auto pipe = pipelined(pipeline_mesh("data-stage-model-2x2x2"), "1f1b", 4);
  const auto dp8 = mesh_args(test_mesh("dp-8x1"));
  const Curve whole = train(run, run.dir.file("whole"), ckpt("ck-whole", 8));  // one process, 8 steps
  auto tail = [&](const Curve& c) {
    Curve t;
    t.loss.assign(c.loss.begin() + 4, c.loss.end());
    return t;
  };
  // Saved on the pipeline mesh at step 4: resumed on [8] data parallel and on one process.
  train(run, run.dir.file("pipe-first"), with(pipe, ckpt("ck-pipe", 4)));
  const std::string from_pipe = run.dir.file("ck-pipe/step_00000004");
  for (const auto& [name, mesh] : {std::make_pair(std::string("dp8"), dp8), std::make_pair(std::string("single"), std::vector<std::string>{})}) {
    CAPTURE(name);
    const Curve c = train(run, run.dir.file("from-pipe-" + name), with(mesh, with(ckpt("ck-" + name, 8), {"--resume", from_pipe})));
    REQUIRE(c.loss.size() == 4);
    check_same_curve(c, tail(whole), kFloatRounding);
  }
  // Saved on [8] at step 4: resumed on the pipeline mesh.
  train(run, run.dir.file("dp8-first"), with(dp8, ckpt("ck-dp8-first", 4)));
  const Curve c = train(run, run.dir.file("from-dp8"),
                        with(pipe, with(ckpt("ck-from-dp8", 8), {"--resume", run.dir.file("ck-dp8-first/step_00000004")})));
  check_same_curve(c, tail(whole), kFloatRounding);
}

TEST_CASE("pipeline: 1F1B holds fewer microbatches' activations than GPipe (M = 8)") {
  // Per stage, 1F1B keeps at most (stages - stage) microbatches between forward and backward,
  // GPipe all 8: the measured bytes the graphs hold follow.
  TinyRun run;
  auto graph_bytes = [&](const std::string& schedule) {
    const std::string out = run.dir.file(schedule);
    train(run, out, with(kFourBlocks, with(pipelined(pipeline_mesh("stage-4"), schedule, 8),
                                           {"--set", "train.steps=2", "--set", "train.eval_every=0"})));
    return read_summary(out)["graph_bytes_per_stage"].get<std::vector<double>>();
  };
  const auto one_f_one_b = graph_bytes("1f1b"), gpipe = graph_bytes("gpipe");
  REQUIRE(one_f_one_b.size() == 4);
  REQUIRE(gpipe.size() == 4);
  for (size_t s = 0; s < 4; ++s)
    MESSAGE("stage " << s << ": bytes held for backward, 1F1B " << one_f_one_b[s] << ", GPipe " << gpipe[s]);
  CHECK(one_f_one_b[0] < 0.6 * gpipe[0]);  // 4 microbatches in flight against 8
  CHECK(one_f_one_b[3] < 0.2 * gpipe[3]);  // 1 against 8
  CHECK(*std::max_element(one_f_one_b.begin(), one_f_one_b.end()) < *std::max_element(gpipe.begin(), gpipe.end()));
}

TEST_CASE("pipeline: configs that cannot run exit 2 naming the key") {
  TinyRun run;
  const auto mesh = mesh_args(pipeline_mesh("data-stage-2x4"));
  struct Case {
    std::vector<std::string> args;
    std::string key;
  };
  const std::vector<Case> cases{
      {{"--set", "model.n_layer=4", "--set", "train.microbatches=2"}, "train.microbatches = 2"},
      {{"--set", "model.n_layer=6", "--set", "train.microbatches=4"}, "runtime.pipeline_layers"},
      {{"--set", "model.n_layer=4", "--set", "train.microbatches=4", "--set", "runtime.pipeline_layers=[1, 1, 1, 2]"},
       "runtime.pipeline_layers [1, 1, 1, 2] sums to 5"},
      {{"--set", "model.n_layer=4", "--set", "train.microbatches=8"}, "data.batch_size = 8"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.key);
    const auto r = run_train(run, run.dir.file("bad"), with(mesh, c.args));
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find(c.key) != std::string::npos, r.output);
  }
}

TEST_CASE("pipeline: a killed stage rank stops the whole job, nothing left running") {
  TinyRun run;
  const std::string out = run.dir.file("out");
  auto argv = with({binary_path("spmd-train"), "--config", run.config, "--set", "output.dir=" + out, "--set",
                    "train.steps=100000", "--set", "train.eval_every=0", "--set", "runtime.timeout_s=20"},
                   with(kFourBlocks, pipelined(pipeline_mesh("stage-4"), "1f1b", 4)));
  RunningProcess launcher = start_process(argv);
  const auto start = std::chrono::steady_clock::now();
  while (!std::ifstream(out + "/metrics.jsonl").good() &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::vector<int> workers = child_pids(launcher.pid);
  REQUIRE(workers.size() == 4);
  kill(workers[2], SIGKILL);  // a middle stage
  const ProcessResult r = finish_process(launcher, 60);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.output.find("killed by signal 9") != std::string::npos, r.output);
  for (int pid : workers) CHECK_FALSE(process_alive(pid));
}
