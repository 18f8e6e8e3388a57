// Which BLAS a run multiplies with is written to summary.json and said in the runtime line; the
// launcher replaces a generic OpenBLAS core (forced here through the environment) for its workers.
#include <doctest/doctest.h>

#include "skip.h"
#include "training_fixture.h"

using namespace spmd::test;

namespace {

nlohmann::json train_with_env(const TinyRun& run, const std::string& out, std::map<std::string, std::string> env) {
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

}  // namespace

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
