// Which BLAS a run multiplies with is written to summary.json and said in the runtime line; the
// launcher replaces a generic OpenBLAS core (forced here through the environment) for its workers;
// a cold start under two busy loops per core chooses as a quiet one does, or by the rule and says so.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include "skip.h"
#include "training_fixture.h"

using namespace spmd::test;

namespace {

// The choice is kept under the run's own folder (SPMD_CACHE_DIR), never in the user's cache.
nlohmann::json train_with_env(const TinyRun& run, const std::string& out, std::map<std::string, std::string> env) {
  env.emplace("SPMD_CACHE_DIR", run.dir.file("cache"));
  std::vector<std::string> argv{binary_path("spmd-train"), "--config", run.config, "--set", "output.dir=" + out,
                                "--set", "train.steps=2", "--set", "train.eval_every=0"};
  auto r = run_process(argv, env, 300);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(r.output.find("; BLAS ") != std::string::npos);
  return read_summary(out);
}

// False only for the refusal the tool gives where no OpenBLAS was found; any other failure fails the test.
bool has_openblas(const TinyRun& run, const std::string& out) {
  std::vector<std::string> argv{binary_path("spmd-train"), "--config", run.config, "--set", "output.dir=" + out,
                                "--set", "train.steps=1", "--set", "train.eval_every=0"};
  const auto r = run_process(argv, {{"SPMD_BLAS", "openblas"}}, 300);
  if (r.exit_code == 0) return true;
  const bool refused = r.exit_code == 2 && r.output.find("this build found no OpenBLAS") != std::string::npos;
  REQUIRE_MESSAGE(refused, r.output);
  return false;
}

// Shell loops that keep every core busy, `per_core` of them per online CPU, killed when the object
// dies (a failed check included).
class BusyLoops {
 public:
  explicit BusyLoops(int per_core) {
    const long cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    for (long i = 0; i < per_core * cpus; ++i)
      loops_.push_back(start_process({"/bin/sh", "-c", "while :; do :; done"}));
  }
  ~BusyLoops() {
    for (RunningProcess& loop : loops_) {
      kill(-loop.pid, SIGKILL);
      finish_process(loop, 10);
    }
  }
  BusyLoops(const BusyLoops&) = delete;
  BusyLoops& operator=(const BusyLoops&) = delete;

 private:
  std::vector<RunningProcess> loops_;
};

// A cold start's choice: the one entry it wrote into its own empty cache, and summary.json's line.
struct Choice {
  nlohmann::json entry;
  std::string blas;
};

Choice choose(const TinyRun& run, const std::string& name, const std::string& cache) {
  const std::string blas = train_with_env(run, run.dir.file(name), {{"SPMD_CACHE_DIR", cache}})["blas"];
  const auto all = nlohmann::json::parse(read_file(cache + "/blas-choice.json"));
  REQUIRE(all.size() == 1);
  return {all.begin().value(), blas};
}

}  // namespace

TEST_CASE("blas: under two busy loops per core a cold start chooses as a quiet one, or by the rule and says so") {
  TinyRun run;
  if (!has_openblas(run, run.dir.file("probe")))
    SPMD_SKIP("this build has no OpenBLAS beside torch (scripts/setup-torch installs scipy-openblas32)");
  const Choice quiet = choose(run, "quiet", run.dir.file("quiet-cache"));
  Choice loaded;
  {
    BusyLoops loops(2);
    loaded = choose(run, "loaded", run.dir.file("loaded-cache"));
  }
  CAPTURE(quiet.entry.dump());
  CAPTURE(loaded.entry.dump());
  CAPTURE(loaded.blas);
  CHECK(quiet.entry["rounds"].size() == 8);
  CHECK(loaded.entry["rounds"].size() == 8);
  // The load was there, and was seen: other processes took most of the CPUs while it timed.
  CHECK(loaded.entry["others_cpu"].get<double>() > 0.25);
  CHECK(loaded.entry["loaded"] == true);
  CHECK(loaded.blas.find("timed under load") != std::string::npos);
  if (loaded.entry["basis"] == "timed") {
    CHECK(loaded.entry["library"] == quiet.entry["library"]);
  } else {
    CHECK(loaded.entry["basis"] == "rule");
    CHECK(loaded.blas.find("by rule for ") != std::string::npos);
  }
  // A choice timed under load is not final: a later start (its entry made an hour old, past the
  // launcher's own start), the loops gone, times again and counts it.
  CHECK(loaded.entry["final"] == false);
  const std::string cache_file = run.dir.file("loaded-cache") + "/blas-choice.json";
  auto all = nlohmann::json::parse(read_file(cache_file));
  all.begin().value()["unix_time"] = loaded.entry["unix_time"].get<double>() - 3600;
  write_file(cache_file, all.dump());
  const Choice later = choose(run, "later", run.dir.file("loaded-cache"));
  CAPTURE(later.entry.dump());
  CHECK(later.entry["retimes"] == 1);
  CHECK(later.entry["unix_time"].get<double>() > loaded.entry["unix_time"].get<double>());
}

TEST_CASE("blas: the run names its BLAS, a generic OpenBLAS core is replaced and a user's core is kept") {
  TinyRun run;
  const std::string blas = train_with_env(run, run.dir.file("auto"), {})["blas"].get<std::string>();
  CHECK((blas.find("MKL") != std::string::npos || blas.find("OpenBLAS") != std::string::npos));
  if (!has_openblas(run, run.dir.file("probe")))
    SPMD_SKIP("this build has no OpenBLAS beside torch (scripts/setup-torch installs scipy-openblas32)");
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
  const std::string forced =
      train_with_env(run, run.dir.file("generic"), {{"SPMD_BLAS", "openblas"}, {"OPENBLAS_CORETYPE", "Prescott"}})["blas"];
  CAPTURE(forced);
  CHECK(forced.find("OpenBLAS") != std::string::npos);
  CHECK(forced.find(avx512 ? "SkylakeX" : avx2 ? "Haswell" : "Prescott") != std::string::npos);
  const std::string kept =
      train_with_env(run, run.dir.file("user"), {{"SPMD_BLAS", "openblas"}, {"OPENBLAS_CORETYPE", "Sandybridge"}})["blas"];
  CAPTURE(kept);
  CHECK(kept.find("Sandybridge") != std::string::npos);
}

TEST_CASE("blas: an unknown SPMD_BLAS is a usage error") {
  TinyRun run;
  std::vector<std::string> argv{binary_path("spmd-train"), "--config", run.config, "--set",
                                "output.dir=" + run.dir.file("out")};
  auto r = run_process(argv, {{"SPMD_BLAS", "fastest"}}, 120);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("SPMD_BLAS=fastest") != std::string::npos);
}
