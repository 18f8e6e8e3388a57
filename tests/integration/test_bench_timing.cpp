// bench_train times each step to a synchronized end: the steps' own times must account for the
// wall time of the timed loop measured from outside, and each must cover its phases. (On a GPU a
// step timed on the host alone would leave its queued work to the next step's clock, or to none.)
#include <doctest/doctest.h>

#include <numeric>

#include <nlohmann/json.hpp>

#include "test_support.h"
#include "training_fixture.h"

using namespace spmd::test;

TEST_CASE("bench: bench_train's step times add up to the timed loop's wall time and cover their phases") {
  TinyRun run;
  const std::string json_path = run.dir.file("bench.json");
  const auto r = run_process({std::string(SPMD_BINARY_DIR) + "/bench/bench_train", "--config", run.config,
                              "--warmup", "1", "--steps", "6", "--peak-size", "128", "--json", json_path},
                             {}, 300);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const auto j = nlohmann::json::parse(read_file(json_path));
  const auto steps = j["step_ms"].get<std::vector<double>>();
  REQUIRE(steps.size() == 6);
  const double sum = std::accumulate(steps.begin(), steps.end(), 0.0);
  const double loop = j["timed_loop_wall_ms"].get<double>();
  INFO("steps sum " << sum << " ms, timed loop " << loop << " ms");
  CHECK(sum <= loop);
  CHECK(sum >= 0.8 * loop);  // between steps only the loss is read and the clocks are taken
  const auto phases = j["step_phases_ms"].get<std::vector<double>>();
  REQUIRE(phases.size() == steps.size());
  for (size_t k = 0; k < steps.size(); ++k) CHECK(steps[k] >= phases[k]);
  // The activations held between forward and backward (the caching allocator counts them), under
  // the peak of live tensors that includes them.
  const double held = j["graph_bytes_max_over_ranks"].get<double>();
  CHECK(held > 0);
  CHECK(held <= j["peak_tensor_mib_max_over_ranks"].get<double>() * (1 << 20));
}
