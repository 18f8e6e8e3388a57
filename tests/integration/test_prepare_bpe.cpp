// spmd-prepare's BPE options as a real process: --vocab bpe:N and --tokenizer DIR succeed and
// name the tokenizer; a malformed bpe:N, --tokenizer with --vocab, and a broken vocab.json exit 2.
// A tokenizer past 65536 ids writes uint32 files and shards that a tiny model trains on.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "test_support.h"
#include "training_fixture.h"
#include "wide_tokenizer.h"

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
  CHECK(prepare(dir, {"--vocab", "bpe:2147483647"}).exit_code == 2);
  CHECK(prepare(dir, {"--vocab", "byte", "--tokenizer", dir.file("tok")}).exit_code == 2);
  spmd::test::write_file(dir.file("tok/vocab.json"), "{\"a\": ");
  auto broken = prepare(dir, {"--tokenizer", dir.file("tok")});
  CHECK(broken.exit_code == 2);
  CHECK(broken.output.find(dir.file("tok/vocab.json")) != std::string::npos);
}

TEST_CASE("prepare: bpe: a tokenizer of 70000 ids writes uint32 files and llm.c shards that a tiny model trains on") {
  using spmd::test::read_summary;
  spmd::test::TinyRun run;  // its config: the tiny model, its data replaced below
  const TempDir& dir = run.dir;
  std::filesystem::create_directories(dir.file("tok"));
  spmd::test::write_wide_tokenizer(dir.file("tok"), 70000, {"The", " cat", " sat", " on", " the", " mat", " dog"});
  std::string text;
  for (int i = 0; i < 300; ++i) text += i % 3 ? "The cat sat on the mat.\n" : "The dog sat on the cat.\n";
  spmd::test::write_file(dir.file("in.txt"), text);
  auto files = run_process({binary_path("spmd-prepare"), "--input", dir.file("in.txt"), "--out", dir.file("flat"),
                            "--tokenizer", dir.file("tok")}, {}, 60);
  INFO(files.output);
  REQUIRE(files.exit_code == 0);
  CHECK(files.output.find("uint32 tokens (more than 65536 ids)") != std::string::npos);
  CHECK(nlohmann::json::parse(spmd::test::read_file(dir.file("flat/meta.json")))["dtype"] == "uint32");
  auto shards = run_process({binary_path("spmd-prepare"), "--input", dir.file("in.txt"), "--out", dir.file("shards"),
                             "--tokenizer", dir.file("tok"), "--shard-tokens", "600", "--quiet"}, {}, 60);
  INFO(shards.output);
  REQUIRE(shards.exit_code == 0);
  CHECK(spmd::test::read_file(dir.file("shards/train_000000.bin")).substr(0, 8) ==
        std::string("\xa1\xd9\x34\x01\x07\x00\x00\x00", 8));  // magic 20240801, version 7

  const std::vector<std::string> wide{"--set", "model.vocab_size=70000", "--set", "train.steps=3", "--set",
                                      "train.eval_every=3", "--set", "train.eval_batches=1"};
  auto with = [&](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::string out = dir.file("out-flat");
  const spmd::test::Curve curve = spmd::test::train(
      run, out, with(wide, {"--set", "data.train=" + dir.file("flat/train.bin"), "--set",
                            "data.val=" + dir.file("flat/val.bin")}));
  REQUIRE(curve.loss.size() == 3);
  CHECK(curve.val_loss.size() == 1);
  // An untrained model spreads its guesses over all 70000 ids: ln(70000) = 11.16.
  CHECK(std::abs(curve.loss[0] - std::log(70000.0)) < 0.3);
  for (double loss : curve.loss) CHECK(std::isfinite(loss));
  // The shards, blended with the flat files: both uint32 formats in one run (and the tiny run's
  // uint16 val.bin beside them).
  const std::string blend = "[{name: flat, path: " + dir.file("flat/train.bin") +
                            ", weight: 1}, {name: shards, path: '" + dir.file("shards/train_*.bin") +
                            "', weight: 1, val: '" + dir.file("shards/val_*.bin") + "'}]";
  const spmd::test::Curve blended = spmd::test::train(
      run, dir.file("out-blend"), with(wide, {"--set", "data.train=null", "--set", "data.sources=" + blend}));
  CHECK(blended.loss.size() == 3);
  // The ids are checked against model.vocab_size, past uint16 too: 65536 is too few for these files.
  auto small = spmd::test::run_train(run, dir.file("out-small"),
                                     with(wide, {"--set", "data.train=" + dir.file("flat/train.bin"), "--set",
                                                 "data.val=" + dir.file("flat/val.bin"), "--set",
                                                 "model.vocab_size=65536"}));
  spmd::test::check_failed_with(small, 2, "but model.vocab_size = 65536");
  CHECK(small.output.find("says vocab_size 70000") != std::string::npos);
  // A cut uint32 shard is refused before training, naming it and what its header says.
  std::filesystem::create_directories(dir.file("cut"));
  const std::string shard = spmd::test::read_file(dir.file("shards/train_000000.bin"));
  spmd::test::write_file(dir.file("cut/train_000000.bin"), shard.substr(0, shard.size() - 4));
  auto cut = spmd::test::run_train(run, dir.file("out-cut"),
                                   with(wide, {"--set", "data.train=" + dir.file("cut/train_000000.bin")}));
  spmd::test::check_failed_with(cut, 2, dir.file("cut/train_000000.bin") + ": truncated or corrupt llm.c shard");
  CHECK(cut.output.find("header says 600 tokens, file holds 599 uint32 tokens") != std::string::npos);
}
