// Token files: nanoGPT and llm.c layouts read alike, every malformed file refused with a
// UsageError that names it, datasets made of directories and globs of shards.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "data/loader.h"
#include "data/token_file.h"
#include "data/windows.h"
#include "test_support.h"
#include "usage_error.h"
#include "util/error.h"

namespace {

using spmd::test::TempDir;
using spmd::test::usage_error_of;

std::string bytes_of(const std::vector<uint16_t>& tokens) {
  return std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
}

std::string llmc_header(int32_t magic, int32_t version, int32_t count) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  return std::string(reinterpret_cast<const char*>(header.data()), 1024);
}

std::vector<uint16_t> iota_tokens(size_t n, uint16_t modulo) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(i % modulo);
  return t;
}

}  // namespace

TEST_CASE("data: nanoGPT and llm.c files hold the same tokens") {
  TempDir dir;
  auto tokens = iota_tokens(1000, 97);
  spmd::test::write_file(dir.file("nano.bin"), bytes_of(tokens));
  spmd::test::write_file(dir.file("llmc.bin"), llmc_header(20240520, 1, 1000) + bytes_of(tokens));
  auto nano = spmd::TokenFile::open(dir.file("nano.bin"), 97);
  auto llmc = spmd::TokenFile::open(dir.file("llmc.bin"), 97);
  CHECK(nano.format() == spmd::TokenFormat::kNanoGpt);
  CHECK(llmc.format() == spmd::TokenFormat::kLlmC);
  REQUIRE(nano.num_tokens() == 1000);
  REQUIRE(llmc.num_tokens() == 1000);
  CHECK(std::memcmp(nano.tokens(), tokens.data(), 2000) == 0);
  CHECK(std::memcmp(llmc.tokens(), tokens.data(), 2000) == 0);
}

TEST_CASE("data: every malformed token file is refused naming the file") {
  TempDir dir;
  auto tokens = iota_tokens(600, 50);
  struct Bad {
    const char* name;
    std::string contents;
    const char* why;  // a word the message must contain
  };
  std::vector<Bad> cases = {
      {"odd.bin", bytes_of(tokens) + "x", "odd byte count"},
      {"empty.bin", "", "empty"},
      {"version.bin", llmc_header(20240520, 2, 600) + bytes_of(tokens), "version"},
      {"truncated.bin", llmc_header(20240520, 1, 700) + bytes_of(tokens), "truncated"},
      {"short_header.bin", llmc_header(20240520, 1, 600).substr(0, 100), "truncated"},
      {"odd_payload.bin", llmc_header(20240520, 1, 600) + bytes_of(tokens) + "x", "truncated"},
      {"magic.bin", llmc_header(12345678, 1, 600) + bytes_of(tokens), "magic"},
      {"vocab.bin", bytes_of(tokens), "vocab_size"},
  };
  for (const auto& bad : cases) {
    CAPTURE(bad.name);
    spmd::test::write_file(dir.file(bad.name), bad.contents);
    int64_t vocab = std::string(bad.name) == "vocab.bin" ? 40 : 50;
    std::string msg = usage_error_of([&] { spmd::TokenDataset::open(dir.file(bad.name), vocab); });
    CHECK(msg.find(dir.file(bad.name)) != std::string::npos);
    CHECK(msg.find(bad.why) != std::string::npos);
  }
}

TEST_CASE("data: a token id beyond the vocabulary is reported with its offset and value") {
  TempDir dir;
  auto tokens = iota_tokens(300, 10);
  tokens[123] = 4242;
  spmd::test::write_file(dir.file("t.bin"), llmc_header(20240520, 1, 300) + bytes_of(tokens));
  std::string msg = usage_error_of([&] { spmd::TokenFile::open(dir.file("t.bin"), 100); });
  CHECK(msg.find(dir.file("t.bin")) != std::string::npos);
  CHECK(msg.find("4242") != std::string::npos);
  CHECK(msg.find(std::to_string(1024 + 123 * 2)) != std::string::npos);  // byte offset
  CHECK_NOTHROW(spmd::TokenFile::open(dir.file("t.bin"), 4243));
}

TEST_CASE("data: a file shorter than one sequence is refused naming the file") {
  TempDir dir;
  spmd::test::write_file(dir.file("a.bin"), bytes_of(iota_tokens(100, 7)));
  spmd::test::write_file(dir.file("b.bin"), bytes_of(iota_tokens(16, 7)));  // < block_size + 1
  auto data = spmd::TokenDataset::open(dir.path(), 7);
  CHECK_NOTHROW(spmd::WindowTable(*data, 15));
  std::string msg = usage_error_of([&] { spmd::DataLoader(data, 4, 16, 1, 0, 1); });
  CHECK(msg.find(dir.file("b.bin")) != std::string::npos);
  CHECK(msg.find("shorter than one sequence") != std::string::npos);
}

TEST_CASE("data: a directory or a glob of shards is one dataset, in sorted order") {
  TempDir dir;
  spmd::test::write_file(dir.file("shard_01.bin"), bytes_of(iota_tokens(50, 3)));
  spmd::test::write_file(dir.file("shard_00.bin"),
                         llmc_header(20240520, 1, 40) + bytes_of(iota_tokens(40, 3)));
  spmd::test::write_file(dir.file("notes.txt"), "not a shard");
  for (const auto& spec : {dir.path(), dir.file("shard_*.bin")}) {
    CAPTURE(spec);
    auto data = spmd::TokenDataset::open(spec, 3);
    REQUIRE(data->files().size() == 2);
    CHECK(data->files()[0].path() == dir.file("shard_00.bin"));
    CHECK(data->num_tokens() == 90);
    // Windows never cross a file: (40-1)/8 + (50-1)/8 = 4 + 6.
    CHECK(spmd::WindowTable(*data, 8).size() == 10);
    // Every 3rd offset: starts 0..31 in the first file (start + 9 <= 40), 0..41 in the second.
    spmd::WindowTable strided(*data, 8, 3);
    CHECK(strided.size() == (31 / 3 + 1) + (41 / 3 + 1));
    std::vector<int64_t> inputs(8), targets(8);
    strided.copy(2, inputs.data(), targets.data());  // starts at token 6 of shard_00
    CHECK(inputs[0] == data->files()[0].tokens()[6]);
    CHECK(targets[7] == data->files()[0].tokens()[14]);
    strided.copy(31 / 3 + 1, inputs.data(), targets.data());  // the second file's first window
    CHECK(inputs[0] == data->files()[1].tokens()[0]);
    CHECK(spmd::WindowTable(*data, 8, 1).size() == 32 + 42);
    CHECK(usage_error_of([&] { spmd::WindowTable(*data, 8, 9); }).find("stride 9") != std::string::npos);
  }
  // A prepared dataset's directory would mix train.bin and val.bin.
  spmd::test::write_file(dir.file("meta.json"), "{}");
  CHECK(usage_error_of([&] { spmd::TokenDataset::open(dir.path(), 3); }).find("meta.json") !=
        std::string::npos);
  CHECK(usage_error_of([&] { spmd::TokenDataset::open(dir.file("nope_*.bin"), 3); })
            .find("nope_*.bin") != std::string::npos);
  CHECK(usage_error_of([&] { spmd::TokenDataset::open(dir.file("missing.bin"), 3); })
            .find("missing.bin") != std::string::npos);
}
