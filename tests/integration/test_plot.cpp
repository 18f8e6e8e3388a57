// `spmd-train plot` as a real process: a metrics file becomes an SVG; bad input exits 2 naming it.
#include <doctest/doctest.h>

#include <filesystem>

#include "test_support.h"

using namespace spmd::test;

namespace {
ProcessResult plot(const std::vector<std::string>& args) {
  std::vector<std::string> argv{binary_path("spmd-train"), "plot"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, {}, 30);
}
}  // namespace

TEST_CASE("plot: spmd-train plot writes the loss curve of a metrics file") {
  TempDir dir;
  write_file(dir.file("metrics.jsonl"), "{\"step\": 0, \"loss\": 4.2}\n{\"step\": 1, \"loss\": 3.9, \"val_loss\": 4.0}\n");
  auto r = plot({dir.file("metrics.jsonl"), "-o", dir.file("curve.svg"), "--title", "my run"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const std::string svg = read_file(dir.file("curve.svg"));
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(svg.find(">my run<") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("curve.svg.tmp")));
  r = plot({dir.file("metrics.jsonl")});  // default: loss.svg beside it
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  CHECK(std::filesystem::exists(dir.file("loss.svg")));
}

TEST_CASE("plot: a malformed line, a missing file or --out directory exits 2 and names it, and nothing is written") {
  TempDir dir;
  write_file(dir.file("metrics.jsonl"), "{\"step\": 0, \"loss\": 4.2}\n{\"step\": 1, \"loss\": 3.9\n");
  auto r = plot({dir.file("metrics.jsonl"), "-o", dir.file("curve.svg")});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find(dir.file("metrics.jsonl") + ":2:") != std::string::npos, r.output);
  CHECK_FALSE(std::filesystem::exists(dir.file("curve.svg")));
  r = plot({dir.file("nope.jsonl"), "-o", dir.file("curve.svg")});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find(dir.file("nope.jsonl")) != std::string::npos, r.output);
  write_file(dir.file("ok.jsonl"), "{\"step\": 0, \"loss\": 4.2}\n");
  r = plot({dir.file("ok.jsonl"), "-o", dir.file("no/such/dir/curve.svg")});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find("--out") != std::string::npos, r.output);
}
