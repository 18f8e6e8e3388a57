// spmd-train under the cluster's own launchers (srun on a one-node Slurm cluster started here,
// mpirun, torchrun) gives exactly the built-in launcher's losses; --max-restarts brings a job
// whose worker was killed back from its last checkpoint with the same losses and every step
// once in metrics.jsonl, and gives up after N restarts naming the rank.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "skip.h"
#include "training_fixture.h"

using namespace spmd::test;
namespace fs = std::filesystem;

namespace {
// The tiny model on a [2,2] mesh for 10 steps, every step logged.
std::vector<std::string> settings() {
  std::vector<std::string> a{"--set", "train.steps=10", "--set", "train.decay_steps=10", "--set", "train.eval_every=0"};
  auto mesh = mesh_args(test_mesh("hybrid-4x2"));
  a.insert(a.end(), mesh.begin(), mesh.end());
  a.insert(a.end(), {"--set", "mesh.shape=[2,2]"});
  return a;
}

// The whole command line of such a run writing to `out`.
std::vector<std::string> train_args(const TinyRun& run, const std::string& out) {
  std::vector<std::string> a{binary_path("spmd-train"), "--config", run.config, "--set", "output.dir=" + out};
  auto s = settings();
  a.insert(a.end(), s.begin(), s.end());
  return a;
}

// `launcher` (argv) in front of spmd-train's arguments.
std::vector<std::string> under(std::vector<std::string> launcher, const std::vector<std::string>& train) {
  launcher.insert(launcher.end(), train.begin(), train.end());
  return launcher;
}

// The full path of a program on PATH, or "".
std::string which(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    if (access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
  return "";
}

void check_equal_losses(const Curve& got, const Curve& want) {
  REQUIRE(got.loss.size() == want.loss.size());
  for (size_t i = 0; i < want.loss.size(); ++i) {
    CAPTURE(i);
    CHECK(got.loss[i] == want.loss[i]);
  }
}

std::vector<int64_t> logged_steps(const std::string& metrics) {
  std::vector<int64_t> steps;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) steps.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
  return steps;
}

// torch 2.x's torchrun (scripts/setup-oracles puts it into .venv-torch2), or "".
std::string find_torchrun() {
  const std::string torchrun = source_path(".venv-torch2/bin/torchrun");
  return access(torchrun.c_str(), X_OK) == 0 ? torchrun : which("torchrun");
}

// A one-node Slurm cluster for the life of the object (tests/launchers/slurm_cluster.sh).
struct SlurmCluster {
  std::string dir;
  ProcessResult started;
  explicit SlurmCluster(const std::string& d) : dir(d) {
    fs::create_directories(dir);
    started = run_process({which("bash"), source_path("tests/launchers/slurm_cluster.sh"), "start", dir}, {}, 60);
  }
  ~SlurmCluster() { run_process({which("bash"), source_path("tests/launchers/slurm_cluster.sh"), "stop", dir}, {}, 60); }
};
}  // namespace

TEST_CASE("launchers: srun, mpirun and torchrun give exactly the built-in launcher's losses") {
  static TinyRun run;  // one baseline for the subcases (the body runs once per subcase)
  static const Curve baseline = train(run, run.dir.file("builtin"), settings());
  REQUIRE(baseline.loss.size() == 10);

  SUBCASE("srun -n 4 on a local Slurm cluster") {
    REQUIRE_MESSAGE(!which("srun").empty(), "srun is not installed (scripts/setup installs slurm-wlm)");
    SlurmCluster cluster(run.dir.file("slurm"));
    REQUIRE_MESSAGE(cluster.started.exit_code == 0, "the Slurm daemons did not start:\n" << cluster.started.output);
    const std::map<std::string, std::string> env{{"SLURM_CONF", cluster.dir + "/slurm.conf"}};
    const std::string out = run.dir.file("srun");
    auto r = run_process(under({which("srun"), "-n", "4", "--overcommit", "--kill-on-bad-exit=1", "--time=3"}, train_args(run, out)), env, 120);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    CHECK_MESSAGE(r.output.find("launcher: srun (SLURM_PROCID, SLURM_NTASKS=4") != std::string::npos, r.output);
    check_equal_losses(read_metrics(out + "/metrics.jsonl"), baseline);
    // SLURM_NTASKS that contradicts the mesh: exit 2 naming it, before any rendezvous.
    auto two = run_process(under({which("srun"), "-n", "2", "--overcommit", "--time=3"}, train_args(run, out)), env, 60);
    CHECK(two.exit_code == 2);
    CHECK_MESSAGE(two.output.find("SLURM_NTASKS=2 but mesh") != std::string::npos, two.output);
  }
  SUBCASE("mpirun -n 4") {
    REQUIRE_MESSAGE(!which("mpirun").empty(), "mpirun is not installed (scripts/setup installs openmpi-bin)");
    const std::string out = run.dir.file("mpirun");
    auto r = run_process(under({which("mpirun"), "--allow-run-as-root", "--oversubscribe", "-n", "4"}, train_args(run, out)), {}, 120);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    CHECK_MESSAGE(r.output.find("launcher: mpirun (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE=4") != std::string::npos, r.output);
    check_equal_losses(read_metrics(out + "/metrics.jsonl"), baseline);
  }
  SUBCASE("torchrun --nproc-per-node 4 --no-python") {
    const std::string found = find_torchrun();
    if (found.empty()) {
      SPMD_SKIP("no torchrun (scripts/setup-oracles puts torch 2.x's into .venv-torch2)");
    }
    const std::string out = run.dir.file("torchrun");
    auto r = run_process(under({found, "--nproc-per-node", "4", "--no-python"}, train_args(run, out)), {}, 120);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    CHECK_MESSAGE(r.output.find("launcher: torchrun (RANK, WORLD_SIZE=4") != std::string::npos, r.output);
    check_equal_losses(read_metrics(out + "/metrics.jsonl"), baseline);
  }
}

TEST_CASE("launchers: partial launcher variables exit 2 naming them") {
  TinyRun run;
  auto r = run_process(train_args(run, run.dir.file("o")), {{"RANK", "0"}}, 60);
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find("RANK is set but WORLD_SIZE is not") != std::string::npos, r.output);
  r = run_process(train_args(run, run.dir.file("o")),
                  {{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_LOCALID", "0"}}, 60);
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find("SLURM_PROCID is set but SLURM_NTASKS is not") != std::string::npos, r.output);
}

TEST_CASE("restarts: kill -9 of a worker -> all restart from the last checkpoint, same losses, each step once") {
  TinyRun run;
  const Curve full = train(run, run.dir.file("full"), settings());
  REQUIRE(full.loss.size() == 10);

  const std::string out = run.dir.file("restarted"), ck = run.dir.file("ck");
  auto argv = train_args(run, out);
  // Synchronous saves: step 6's is committed before step 7 starts (an asynchronous one may still be
  // in flight when rank 1 dies, and the restart would then rightly resume from step 3).
  argv.insert(argv.end(), {"--set", "checkpoint.dir=" + ck, "--set", "checkpoint.every=3", "--set",
                           "checkpoint.async=false", "--max-restarts", "1"});
  auto r = run_process(argv, {{"SPMD_TEST_HOOKS", "sigkill@7:1"}}, 180);  // rank 1 dies before step 7, once
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_MESSAGE(r.output.find("restart 1 of 1 after rank 1 (pid") != std::string::npos, r.output);
  CHECK_MESSAGE(r.output.find("was killed by signal 9") != std::string::npos, r.output);
  CHECK_MESSAGE(r.output.find("resuming from " + ck + "/step_00000006") != std::string::npos, r.output);
  CHECK(logged_steps(out + "/metrics.jsonl") == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  check_equal_losses(read_metrics(out + "/metrics.jsonl"), full);
}

TEST_CASE("restarts: torchrun --max-restarts with --resume auto: the same command starts fresh, then resumes") {
  const std::string torchrun = find_torchrun();
  if (torchrun.empty()) {
    SPMD_SKIP("no torchrun (scripts/setup-oracles puts torch 2.x's into .venv-torch2)");
  }
  TinyRun run;
  const Curve full = train(run, run.dir.file("full"), settings());
  const std::string out = run.dir.file("torchrun"), ck = run.dir.file("ck");
  auto argv = under({torchrun, "--nproc-per-node", "4", "--no-python", "--max-restarts", "1"}, train_args(run, out));
  argv.insert(argv.end(), {"--set", "checkpoint.dir=" + ck, "--set", "checkpoint.every=3", "--set",
                           "checkpoint.async=false", "--resume", "auto"});  // step 6 committed before step 7
  auto r = run_process(argv, {{"SPMD_TEST_HOOKS", "sigkill@7:1"}}, 240);  // attempt 0: rank 1 dies before step 7
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_MESSAGE(r.output.find("--resume auto: no checkpoint in " + ck + " yet, starting from step 0") != std::string::npos,
                r.output);
  CHECK_MESSAGE(r.output.find("resumed from " + ck + "/step_00000006 at step 6") != std::string::npos, r.output);
  CHECK(logged_steps(out + "/metrics.jsonl") == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  check_equal_losses(read_metrics(out + "/metrics.jsonl"), full);
}

TEST_CASE("restarts: a failure beyond --max-restarts exits 1 naming the rank, a usage error is not restarted") {
  TinyRun run;
  const std::string ck = run.dir.file("ck");
  auto argv = train_args(run, run.dir.file("o"));
  argv.insert(argv.end(), {"--set", "checkpoint.dir=" + ck, "--set", "checkpoint.every=3", "--max-restarts", "1"});
  auto r = run_process(argv, {{"SPMD_TEST_HOOKS", "sigkill_always@7:1"}}, 180);  // dies again after the restart
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.output.find("restart 1 of 1 after rank 1") != std::string::npos, r.output);
  CHECK_MESSAGE(r.output.find("giving up after 1 restart(s) (--max-restarts 1): rank 1 (pid") != std::string::npos, r.output);
  CHECK(r.output.find("restart 2") == std::string::npos);

  argv.insert(argv.end(), {"--resume", run.dir.file("no-such-checkpoint")});  // each worker: exit 2
  auto usage = run_process(argv, {}, 120);
  CHECK(usage.exit_code == 2);
  CHECK_MESSAGE(usage.output.find("no-such-checkpoint") != std::string::npos, usage.output);
  CHECK(usage.output.find("restart 1") == std::string::npos);
}
