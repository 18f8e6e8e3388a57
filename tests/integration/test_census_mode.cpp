// bench_train --census GPU as a process: the tables, the last line scripts read (and its copy in
// the JSON), the device path's invariants in the JSON, and the refusals (a mesh of more than one
// device, a GPU not in the table).
#include <doctest/doctest.h>

#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "test_support.h"
#include "training_fixture.h"

using namespace spmd::test;

namespace {

std::string bench_train() { return std::string(SPMD_BINARY_DIR) + "/bench/bench_train"; }

std::string last_line(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

}  // namespace

TEST_CASE("census: bench_train --census h100 ends with the census line and writes the census as JSON") {
  TinyRun run;
  const std::string json_path = run.dir.file("census.json");
  const auto r = run_process({bench_train(), "--config", run.config, "--set", "model.matmul_dtype=bfloat16",
                              "--census", "h100", "--json", json_path},
                             {}, 300);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const std::string line = last_line(r.output);
  CHECK_MESSAGE(std::regex_match(line, std::regex(R"(census: \d+\.\d GB outside products, \d+\.\d\d TFLOP in )"
                                                  R"(products, \d+ launches, \d+\.\d ms on H100 SXM \(\d+\.\d % MFU\))")),
                line);
  CHECK(contains(r.output, "by op kind"));
  CHECK(contains(r.output, "block.1"));
  const auto j = nlohmann::json::parse(read_file(json_path));
  CHECK(j["line"].get<std::string>() == line);
  CHECK(j["gpu"]["key"] == "h100");
  CHECK(j["launches"].get<int64_t>() > 0);
  CHECK(j["product_flops"].get<double>() > 0);
  CHECK(j["host_sync_count"].get<int64_t>() == 0);  // the device path reads nothing back in a step
  CHECK(j["saved_bytes_by_dtype"]["BFloat16"].get<int64_t>() > 0);
  const auto overrides = j["overrides"].get<std::vector<std::string>>();
  CHECK(std::find(overrides.begin(), overrides.end(), "runtime.cpu_kernels=generic") != overrides.end());
}

TEST_CASE("census: bench_train --census refuses a mesh of more than one device and a GPU not in its table") {
  TinyRun run;
  const auto mesh = run_process({bench_train(), "--config", run.config, "--set", "mesh.shape=[2,1]", "--census", "h100"},
                                {}, 120);
  CHECK(mesh.exit_code == 2);
  CHECK_MESSAGE(contains(mesh.output, "--census counts one rank's step"), mesh.output);
  const auto gpu = run_process({bench_train(), "--config", run.config, "--census", "v100"}, {}, 120);
  CHECK(gpu.exit_code == 2);
  CHECK_MESSAGE(contains(gpu.output, "v100"), gpu.output);
}
