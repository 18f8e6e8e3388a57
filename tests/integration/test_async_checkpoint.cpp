// Checkpoints written in the background (checkpoint.async), as real processes and real files:
// the same bytes as a synchronous save on every kind of mesh, exact resume, a rank killed while
// its file is half written, a full disk (a tiny tmpfs), and a save at every step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "skip.h"
#include "training_fixture.h"

using namespace spmd::test;
namespace fs = std::filesystem;

namespace {

// Two-rank meshes: data parallel, tensor parallel, FSDP and a two-stage pipeline.
const std::vector<TestMesh> kTwoRankMeshes{
    {"dp-2", "[2,1]", "[data,model]", kTpRules},
    {"tp-2", "[1,2]", "[data,model]", kTpRules},
    {"fsdp-2", "[2]", "[fsdp]", "[[batch, fsdp], [embed, fsdp], " + kOthers + "]"},
    {"stage-2", "[2]", "[stage]", "[[batch, null], [layers, stage], " + kOthers + "]"},
};
const TestMesh& tp2 = kTwoRankMeshes[1];

std::vector<std::string> saving(const std::string& dir, int steps, int every, bool async) {
  return {"--set", "checkpoint.dir=" + dir,          "--set", "checkpoint.every=" + std::to_string(every),
          "--set", "checkpoint.keep=3",              "--set", std::string("checkpoint.async=") + (async ? "true" : "false"),
          "--set", "train.steps=" + std::to_string(steps), "--set", "train.decay_steps=30",
          "--set", "train.eval_every=0"};
}

std::string step_dir(const std::string& ck, int step) {
  char name[32];
  std::snprintf(name, sizeof name, "/step_%08d", step);
  return ck + name;
}

// Two checkpoints hold the same bytes: every shard file equal, the indexes equal but for the
// config text (which names each run's own directories and its checkpoint.async).
void check_same_checkpoint(const std::string& async_dir, const std::string& sync_dir) {
  REQUIRE(fs::exists(async_dir + "/index.json"));
  REQUIRE(fs::exists(sync_dir + "/index.json"));
  int shard_files = 0;
  for (const auto& entry : fs::directory_iterator(sync_dir)) {
    const std::string name = entry.path().filename().string();
    if (name == "index.json") continue;
    CAPTURE(name);
    REQUIRE(fs::exists(async_dir + "/" + name));
    CHECK(read_file(async_dir + "/" + name) == read_file(entry.path().string()));
    ++shard_files;
  }
  CHECK(shard_files >= 1);
  auto async_index = nlohmann::json::parse(read_file(async_dir + "/index.json"));
  auto sync_index = nlohmann::json::parse(read_file(sync_dir + "/index.json"));
  const std::string async_config = async_index["config"], sync_config = sync_index["config"];
  CHECK(async_config.find("async: true") != std::string::npos);
  CHECK(sync_config.find("async: false") != std::string::npos);
  async_index.erase("config");
  sync_index.erase("config");
  CHECK(async_index == sync_index);
}

// Losses by step number, from metrics.jsonl.
std::map<int64_t, double> losses_by_step(const std::string& out) {
  std::map<int64_t, double> losses;
  std::ifstream in(out + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    losses[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return losses;
}

// The resumed run's losses equal the uninterrupted run's, bit for bit, for the steps after the
// `from` it resumed at (metrics.jsonl numbers steps from 1, as the progress line).
void check_resumed_exactly(const std::string& resumed_out, const std::string& full_out, int64_t from, int64_t to) {
  const auto resumed = losses_by_step(resumed_out), full = losses_by_step(full_out);
  REQUIRE(resumed.size() == static_cast<size_t>(to - from));
  for (int64_t s = from + 1; s <= to; ++s) {
    CAPTURE(s);
    REQUIRE(resumed.count(s));
    CHECK(resumed.at(s) == full.at(s));
  }
}

// A tmpfs of `bytes` mounted on a fresh directory, unmounted at the end (needs root).
struct TinyDisk {
  std::string path;
  bool mounted = false;
  std::string why_not;
  TinyDisk(const std::string& where, uint64_t bytes) : path(where) {
    fs::create_directories(path);
    auto r = run_process({"/bin/mount", "-t", "tmpfs", "-o", "size=" + std::to_string(bytes), "tmpfs", path}, {}, 30);
    mounted = r.exit_code == 0;
    why_not = r.output;
  }
  ~TinyDisk() {
    if (mounted) run_process({"/bin/umount", path}, {}, 30);
  }
};

uint64_t bytes_on_disk(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) total += (entry.file_size() + 4095) / 4096 * 4096;
  return total;
}
}  // namespace

TEST_CASE("async checkpoint: the same bytes as a synchronous save on DP, TP, FSDP and pipeline meshes") {
  TinyRun run;
  for (const auto& mesh : kTwoRankMeshes) {
    CAPTURE(mesh.name);
    const std::string a = run.dir.file(mesh.name + "-async"), s = run.dir.file(mesh.name + "-sync");
    auto args = mesh_args(mesh);
    if (mesh.name == "stage-2") args = with(args, {"--set", "train.microbatches=2"});  // one per stage
    train(run, a + "-out", with(args, saving(a, 10, 5, true)));
    train(run, s + "-out", with(args, saving(s, 10, 5, false)));
    CHECK(read_summary(a + "-out")["checkpoint_async"] == true);
    CHECK(read_summary(s + "-out")["checkpoint_async"] == false);
    CHECK(read_summary(a + "-out")["checkpoint_write_s"].size() == 2);
    for (int step : {5, 10}) {
      CAPTURE(step);
      check_same_checkpoint(step_dir(a, step), step_dir(s, step));
    }
  }
}

TEST_CASE("async checkpoint: --resume from an async checkpoint continues the run exactly") {
  TinyRun run;
  const auto mesh = mesh_args(tp2);
  train(run, run.dir.file("full"), with(mesh, saving(run.dir.file("ck-full"), 20, 10, true)));
  train(run, run.dir.file("first"), with(mesh, saving(run.dir.file("ck"), 10, 10, true)));
  REQUIRE(fs::exists(step_dir(run.dir.file("ck"), 10) + "/index.json"));
  train(run, run.dir.file("resumed"), with(mesh, with(saving(run.dir.file("ck"), 20, 10, true), {"--resume"})));
  check_resumed_exactly(run.dir.file("resumed"), run.dir.file("full"), 10, 20);
}

TEST_CASE("async checkpoint: kill -9 of a rank mid-file leaves the previous checkpoint the latest, and it resumes exactly") {
  TinyRun run;
  const auto mesh = mesh_args(tp2);
  const std::string ck = run.dir.file("ck");
  train(run, run.dir.file("full"), with(mesh, saving(run.dir.file("ck-full"), 30, 10, true)));
  auto killed = run_train(run, run.dir.file("o1"), with(mesh, saving(ck, 30, 10, true)), "sigkill_in_save@20:1");
  check_failed_with(killed, 1, "rank 1 (pid");
  CHECK_MESSAGE(killed.output.find("was killed by signal 9") != std::string::npos, killed.output);
  CHECK(fs::exists(step_dir(ck, 10) + "/index.json"));
  CHECK_FALSE(fs::exists(step_dir(ck, 20)));
  // Rank 1's file of step 20 was cut off: shorter than the complete one of step 10.
  const std::string partial = step_dir(ck, 20) + ".tmp/rank_00001.safetensors";
  REQUIRE_MESSAGE(fs::exists(partial), killed.output);
  CHECK(fs::file_size(partial) < fs::file_size(step_dir(ck, 10) + "/rank_00001.safetensors"));
  CHECK_FALSE(fs::exists(step_dir(ck, 20) + ".tmp/index.json"));

  auto resumed = run_train(run, run.dir.file("o2"), with(mesh, with(saving(ck, 30, 10, true), {"--resume"})));
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
  check_resumed_exactly(run.dir.file("o2"), run.dir.file("full"), 10, 30);
  CHECK(fs::exists(step_dir(ck, 30) + "/index.json"));
  CHECK_FALSE(fs::exists(step_dir(ck, 20) + ".tmp"));
}

TEST_CASE("async checkpoint: a full disk stops the run with exit 1 naming the directory, and loses nothing") {
  TinyRun run;
  const auto mesh = mesh_args(tp2);
  // How much one checkpoint takes, from a run on the ordinary disk.
  train(run, run.dir.file("full"), with(mesh, saving(run.dir.file("ck-full"), 20, 10, true)));
  const uint64_t one = bytes_on_disk(step_dir(run.dir.file("ck-full"), 10));
  TinyDisk disk(run.dir.file("tiny-disk"), one + one / 2);  // room for step 10, not for step 20 beside it
  if (!disk.mounted) {
    SPMD_SKIP("cannot mount a tmpfs here (needs root): " + disk.why_not);
  }
  const std::string ck = disk.path + "/ck";
  auto r = run_train(run, run.dir.file("o1"), with(mesh, saving(ck, 30, 10, true)));
  check_failed_with(r, 1, "failed");
  // Raised in the loop soon after step 20's save failed, not at the end of the run.
  const auto reached = losses_by_step(run.dir.file("o1"));
  REQUIRE_FALSE(reached.empty());
  CHECK(reached.rbegin()->first >= 19);
  CHECK(reached.rbegin()->first < 29);
  CHECK_MESSAGE(r.output.find("the checkpoint of step 20 in " + ck + " failed") != std::string::npos, r.output);
  CHECK(r.output.find("No space left on device") != std::string::npos);
  CHECK(r.output.find("the latest checkpoint is still " + step_dir(ck, 10)) != std::string::npos);
  CHECK(r.output.find("terminate called") == std::string::npos);
  CHECK(fs::exists(step_dir(ck, 10) + "/index.json"));
  CHECK_FALSE(fs::exists(step_dir(ck, 20)));
  CHECK_FALSE(fs::exists(step_dir(ck, 20) + ".tmp"));  // its temporary files were removed
  // Nothing lost: step 10 holds the same bytes as the uninterrupted run's, and resumes exactly.
  for (const char* file : {"rank_00000.safetensors", "rank_00001.safetensors"})
    CHECK(read_file(step_dir(ck, 10) + "/" + file) == read_file(step_dir(run.dir.file("ck-full"), 10) + "/" + file));
  train(run, run.dir.file("o2"),
        with(mesh, with(saving(run.dir.file("ck-elsewhere"), 20, 10, true), {"--resume", step_dir(ck, 10)})));
  check_resumed_exactly(run.dir.file("o2"), run.dir.file("full"), 10, 20);
}

TEST_CASE("async checkpoint: a save at every step for 30 steps") {
  TinyRun run;
  const auto mesh = mesh_args(tp2);
  const std::string every = run.dir.file("ck-every"), sync = run.dir.file("ck-sync");
  train(run, run.dir.file("plain"), with(mesh, {"--set", "train.steps=30", "--set", "train.decay_steps=30",
                                                "--set", "train.eval_every=0"}));
  train(run, run.dir.file("every"), with(mesh, saving(every, 30, 1, true)));
  train(run, run.dir.file("sync"), with(mesh, saving(sync, 30, 10, false)));
  const auto summary = read_summary(run.dir.file("every"));
  CHECK(summary["checkpoint_blocked_ms"].size() == 30);
  CHECK(summary["checkpoint_write_s"].size() == 30);
  // Saving never changed the training, the newest checkpoints are complete, no temporary one is left.
  check_resumed_exactly(run.dir.file("every"), run.dir.file("plain"), 0, 30);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(every)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"step_00000028", "step_00000029", "step_00000030"});
  check_same_checkpoint(step_dir(every, 30), step_dir(sync, 30));
}

TEST_CASE("async checkpoint: a failed write on one rank stops the run at a step boundary with exit 1, naming step and rank") {
  TinyRun run;  // the writer's error path without root: SPMD_TEST_HOOKS fails rank 1's write of step 20
  const auto mesh = mesh_args(tp2);
  const std::string ck = run.dir.file("ck");
  auto r = run_train(run, run.dir.file("o1"), with(mesh, saving(ck, 30, 10, true)), "fail_save_write@20:1");
  check_failed_with(r, 1, "the checkpoint of step 20 in " + ck + " failed: rank 1: cannot write");
  CHECK_MESSAGE(r.output.find("injected write failure") != std::string::npos, r.output);
  // Raised in the loop after step 20's save, not at the end of the run; nothing committed of it.
  const auto reached = losses_by_step(run.dir.file("o1"));
  REQUIRE_FALSE(reached.empty());
  MESSAGE("the failure stopped the loop after step " << reached.rbegin()->first);
  CHECK(reached.rbegin()->first >= 19);
  CHECK(reached.rbegin()->first < 29);
  CHECK(fs::exists(step_dir(ck, 10) + "/index.json"));
  CHECK_FALSE(fs::exists(step_dir(ck, 20)));
  CHECK_FALSE(fs::exists(step_dir(ck, 20) + ".tmp"));
}

TEST_CASE("async checkpoint: the files are written while training goes on, and hold the synchronous save's bytes") {
  TinyRun run;  // a slow disk (every writer waits 300 ms): the step returns long before the bytes land
  const auto mesh = mesh_args(tp2);
  const std::string a = run.dir.file("a"), s = run.dir.file("s");
  auto slow = run_train(run, a + "-out", with(mesh, saving(a, 20, 10, true)), "slow_save_write=300");
  REQUIRE_MESSAGE(slow.exit_code == 0, slow.output);
  train(run, s + "-out", with(mesh, saving(s, 20, 10, false)));
  const auto written_after = read_summary(a + "-out")["checkpoint_written_after_return_ms"];
  REQUIRE(written_after.size() == 2);
  for (const auto& ms : written_after) {
    MESSAGE("a shard file was written " << ms.get<double>() << " ms after its step returned");
    CHECK(ms.get<double>() > 0);
  }
  for (int step : {10, 20}) {
    CAPTURE(step);
    check_same_checkpoint(step_dir(a, step), step_dir(s, step));
  }
  CHECK(losses_by_step(a + "-out") == losses_by_step(s + "-out"));
}
