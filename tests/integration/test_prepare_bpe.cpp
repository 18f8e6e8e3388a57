// spmd-prepare's BPE options as a real process: --vocab bpe:N and --tokenizer DIR succeed and
// name the tokenizer; a malformed bpe:N, --tokenizer with --vocab, and a broken vocab.json exit 2.
#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace {

using spmd::test::binary_path;
using spmd::test::run_process;
using spmd::test::TempDir;

spmd::test::ProcessResult prepare(const TempDir& dir, std::vector<std::string> args) {
  std::vector<std::string> argv = {binary_path("spmd-prepare"), "--input", dir.file("in.txt"),
                                   "--out", dir.file("out"), "--quiet"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, {}, 60);
}

}  // namespace

TEST_CASE("prepare: bpe: spmd-prepare learns, reuses and refuses BPE tokenizers") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 100; ++i) text += "To be, or not to be — ça, c'est la question. 🎭\n";
  spmd::test::write_file(dir.file("in.txt"), text);

  auto learned = prepare(dir, {"--vocab", "bpe:300"});
  INFO(learned.output);
  REQUIRE(learned.exit_code == 0);
  CHECK(learned.output.find("BPE from bpe:300") != std::string::npos);
  auto meta = nlohmann::json::parse(spmd::test::read_file(dir.file("out/meta.json")));
  CHECK(meta["vocabulary"] == "bpe");
  CHECK(meta["tokenizer"]["vocab"] == "vocab.json");

  // The learned files are a tokenizer directory for the next dataset.
  std::filesystem::rename(dir.file("out"), dir.file("tok"));
  auto reused = prepare(dir, {"--tokenizer", dir.file("tok")});
  INFO(reused.output);
  CHECK(reused.exit_code == 0);
  CHECK(spmd::test::read_file(dir.file("out/train.bin")) ==
        spmd::test::read_file(dir.file("tok/train.bin")));

  CHECK(prepare(dir, {"--vocab", "bpe:x"}).exit_code == 2);
  CHECK(prepare(dir, {"--vocab", "bpe:"}).exit_code == 2);
  CHECK(prepare(dir, {"--vocab", "bpe:99999"}).exit_code == 2);
  CHECK(prepare(dir, {"--vocab", "byte", "--tokenizer", dir.file("tok")}).exit_code == 2);
  spmd::test::write_file(dir.file("tok/vocab.json"), "{\"a\": ");
  auto broken = prepare(dir, {"--tokenizer", dir.file("tok")});
  CHECK(broken.exit_code == 2);
  CHECK(broken.output.find(dir.file("tok/vocab.json")) != std::string::npos);
}
