// spmd-prepare as a real process: outputs and exit codes (0 ok, 2 for bad arguments and input);
// the fortunes recipe fails clearly when the package is missing.
#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace {

using spmd::test::binary_path;
using spmd::test::run_process;
using spmd::test::TempDir;

}  // namespace

TEST_CASE("prepare: spmd-prepare writes train.bin, val.bin and meta.json") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 200; ++i) text += "To be, or not to be — ça, c'est la question. 🎭\n";
  spmd::test::write_file(dir.file("in.txt"), text);
  auto result = run_process({binary_path("spmd-prepare"), "--input", dir.file("in.txt"), "--out",
                             dir.file("out"), "--val-fraction", "0.2"});
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  auto meta = nlohmann::json::parse(spmd::test::read_file(dir.file("out/meta.json")));
  const int64_t n = 200 * 47;  // code points per line, newline included
  CHECK(meta["train_tokens"].get<int64_t>() + meta["val_tokens"].get<int64_t>() == n);
  CHECK(meta["train_tokens"].get<int64_t>() == static_cast<int64_t>(n * 0.8));
  CHECK(meta["vocab_size"].get<int64_t>() == static_cast<int64_t>(meta["vocabulary"].size()));
  CHECK(std::filesystem::file_size(dir.file("out/train.bin")) ==
        meta["train_tokens"].get<size_t>() * 2);
  CHECK(std::filesystem::file_size(dir.file("out/val.bin")) == meta["val_tokens"].get<size_t>() * 2);
  CHECK(result.output.find("vocab_size") != std::string::npos);
}

TEST_CASE("prepare: spmd-prepare exits 2 for bad arguments and bad input") {
  TempDir dir;
  auto missing = run_process({binary_path("spmd-prepare"), "--input", dir.file("missing.txt"),
                              "--out", dir.file("out")});
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find(dir.file("missing.txt")) != std::string::npos);

  spmd::test::write_file(dir.file("empty.txt"), "");
  auto empty = run_process({binary_path("spmd-prepare"), "--input", dir.file("empty.txt"), "--out",
                            dir.file("out")});
  CHECK(empty.exit_code == 2);
  CHECK(empty.output.find("empty") != std::string::npos);

  spmd::test::write_file(dir.file("bad.txt"), "abc\xff");
  auto bad = run_process({binary_path("spmd-prepare"), "--input", dir.file("bad.txt"), "--out",
                          dir.file("out")});
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("byte offset 3") != std::string::npos);

  CHECK(run_process({binary_path("spmd-prepare"), "--out", dir.file("out")}).exit_code == 2);
  CHECK(run_process({binary_path("spmd-prepare"), "--input", dir.file("bad.txt"), "--out",
                     dir.file("out"), "--vocab", "word"})
            .exit_code == 2);
  CHECK(run_process({binary_path("spmd-prepare"), "--input", dir.file("bad.txt"), "--out",
                     dir.file("out"), "--val-fraction", "1.5"})
            .exit_code == 2);
  CHECK(run_process({binary_path("spmd-prepare"), "--help"}).exit_code == 0);
  CHECK(!std::filesystem::exists(dir.file("out/meta.json")));
}

TEST_CASE("prepare: the fortunes recipe says so when the package is missing") {
  TempDir dir;
  auto result = run_process({"/bin/bash", spmd::test::source_path("datasets/fortunes/prepare.sh"),
                             binary_path("spmd-prepare")},
                            {{"FORTUNES_DIR", dir.file("no-fortunes")}});
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("install the fortunes package") != std::string::npos);
}
