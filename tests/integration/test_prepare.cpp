// spmd-prepare as a real process: outputs and exit codes (0 ok, 2 for bad arguments and input,
// 1 when interrupted, with nothing left behind); the fortunes recipe fails clearly when the
// package is missing.
#include <doctest/doctest.h>

#include <signal.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace {

using spmd::test::binary_path;
using spmd::test::check_failed_with;
using spmd::test::run_process;
using spmd::test::TempDir;

// Runs argv to its end (exit 0 required) and returns its peak resident memory (VmHWM), in MB,
// read from /proc while it runs.
double peak_memory_mb(const std::vector<std::string>& argv) {
  spmd::test::RunningProcess p = spmd::test::start_process(argv);
  const std::string status_path = "/proc/" + std::to_string(p.pid) + "/status";
  // Until the child has exec'd, its status is the forked test process's (hundreds of MB here):
  // only samples under the program's own name (status truncates it to 15 characters) count.
  const std::string program = std::filesystem::path(argv.front()).filename().string().substr(0, 15);
  double peak_kb = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (bool running = true; running && std::chrono::steady_clock::now() < deadline;) {
    std::ifstream status(status_path);
    running = false;
    bool exec_done = false;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Name:", 0) == 0) exec_done = line.substr(line.find_first_not_of(" \t", 5)) == program;
      if (line.rfind("VmHWM:", 0) == 0) {
        if (exec_done) peak_kb = std::max(peak_kb, std::stod(line.substr(6)));
        running = true;  // a process that has exited (a zombie) has no VmHWM line
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto result = spmd::test::finish_process(p, 60);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return peak_kb / 1024;
}

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

TEST_CASE("prepare: a bad line past the first 256 KiB batch, plain or inside a .gz, is named by its own line number") {
  TempDir dir;
  std::string text;
  const int bad_line = 30001;  // ~930 KB of good lines before it: several 256 KiB batches
  for (int i = 1; i < bad_line; ++i) text += "{\"text\": \"line " + std::to_string(i) + " ok\"}\n";
  text += "{\"text\": \"broken\"\n";
  for (int i = 0; i < 100; ++i) text += "{\"text\": \"after\"}\n";
  spmd::test::write_file(dir.file("big.jsonl"), text);
  const auto gz = run_process({"/bin/sh", "-c", "gzip -c '" + dir.file("big.jsonl") + "' > '" + dir.file("big.jsonl.gz") + "'"});
  REQUIRE_MESSAGE(gz.exit_code == 0, gz.output);
  for (const std::string name : {"big.jsonl", "big.jsonl.gz"}) {
    CAPTURE(name);
    for (const char* workers : {"1", "2"}) {
      CAPTURE(workers);
      auto bad = run_process({binary_path("spmd-prepare"), "--input", dir.file(name), "--out", dir.file("out"),
                              "--vocab", "byte", "--workers", workers});
      check_failed_with(bad, 2, dir.file(name) + ":" + std::to_string(bad_line) + ": not valid JSON");
      CHECK(!std::filesystem::exists(dir.file("out/meta.json")));
    }
  }
}

TEST_CASE("prepare: JSON Lines from the command line: a bad line is exit 2 naming file:line") {
  TempDir dir;
  spmd::test::write_file(dir.file("in.jsonl"), "{\"text\": \"a\"}\n{\"text\": \"b\"\n{\"text\": \"c\"}\n");
  auto bad = run_process({binary_path("spmd-prepare"), "--input", dir.file("in.jsonl"), "--out",
                          dir.file("out"), "--vocab", "byte"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find(dir.file("in.jsonl") + ":2: not valid JSON") != std::string::npos);
  CHECK(!std::filesystem::exists(dir.file("out/meta.json")));

  auto skipped = run_process({binary_path("spmd-prepare"), "--input", dir.file("in.jsonl"), "--out",
                              dir.file("out"), "--vocab", "byte", "--skip-bad-lines", "--workers",
                              "2", "--val-tokens", "1"});
  INFO(skipped.output);
  REQUIRE(skipped.exit_code == 0);
  auto meta = nlohmann::json::parse(spmd::test::read_file(dir.file("out/meta.json")));
  CHECK(meta["skipped_bad_lines"] == 1);
  CHECK(meta["documents"] == 2);
  CHECK(meta["val_tokens"] == 1);
  CHECK(spmd::test::read_file(dir.file("out/train.bin")) == std::string("a\0", 2));
  CHECK(spmd::test::read_file(dir.file("out/val.bin")) == std::string("c\0", 2));

  // The split is given one way: a fraction, a token count, or shards (val first).
  CHECK(run_process({binary_path("spmd-prepare"), "--input", dir.file("in.jsonl"), "--out",
                     dir.file("out2"), "--shard-tokens", "10", "--val-fraction", "0.5"})
            .exit_code == 2);
}

TEST_CASE("prepare: Ctrl-C while writing shards leaves no shard, no temporary file, no meta.json") {
  TempDir dir;
  std::string text;
  for (int i = 0; text.size() < (size_t{24} << 20); ++i)
    text += "Document " + std::to_string(i) + " speaks of things, ça et là, 日本語 too.\n";
  spmd::test::write_file(dir.file("in.txt"), text);
  spmd::test::RunningProcess p = spmd::test::start_process(
      {binary_path("spmd-prepare"), "--input", dir.file("in.txt"), "--out", dir.file("out"),
       "--vocab", "bpe:50", "--workers", "1", "--shard-tokens", "100000", "--quiet"});
  // Wait for the first complete shard, then interrupt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!std::filesystem::exists(dir.file("out/val_000000.bin")) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(std::filesystem::exists(dir.file("out/val_000000.bin")));
  kill(p.pid, SIGINT);
  auto result = spmd::test::finish_process(p, 60);
  INFO(result.output);
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("interrupted") != std::string::npos);
  CHECK(std::filesystem::is_empty(dir.file("out")));
}

TEST_CASE("prepare: a corpus far larger than the memory prepare may use streams through") {
  TempDir dir;
  // 96 MB of text in a small gzip file, and one line of it: the big run's peak resident memory may
  // exceed the small run's (libraries, tokenizer) by the workers' queues, not by the corpus.
  std::string line;
  for (int i = 0; i < 40; ++i) line += "{\"text\": \"streamed, not loaded: line " + std::to_string(i) + "\"}\n";
  gzFile f = gzopen(dir.file("big.jsonl.gz").c_str(), "wb1");
  REQUIRE(f != nullptr);
  size_t written = 0;
  bool ok = true;
  for (; written < (size_t{96} << 20); written += line.size())
    ok = ok && gzwrite(f, line.data(), static_cast<unsigned>(line.size())) == static_cast<int>(line.size());
  REQUIRE(ok);
  REQUIRE(gzclose(f) == Z_OK);
  spmd::test::write_file(dir.file("small.jsonl"), line);
  auto prepare = [&](const std::string& input, const std::string& out) {
    return peak_memory_mb({binary_path("spmd-prepare"), "--input", input, "--out", out, "--vocab",
                           "byte", "--workers", "2", "--shard-tokens", "16000000", "--val-tokens",
                           "100", "--quiet"});
  };
  const double small_mb = prepare(dir.file("small.jsonl"), dir.file("small"));
  const double big_mb = prepare(dir.file("big.jsonl.gz"), dir.file("big"));
  MESSAGE("spmd-prepare peak resident memory: " << small_mb << " MB on one line, " << big_mb
          << " MB on " << written / 1048576 << " MB of text");
  CHECK(small_mb > 0);
  // In flight: 2 x 2 + 2 batches of ~1 MB of text, its documents and 2 bytes a token: ~25 MB.
  CHECK(big_mb - small_mb < 48);
  auto meta = nlohmann::json::parse(spmd::test::read_file(dir.file("big/meta.json")));
  CHECK(meta["documents"].get<int64_t>() == static_cast<int64_t>(written / line.size()) * 40);
}
