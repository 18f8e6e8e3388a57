// Token files: nanoGPT and llm.c layouts read alike, every malformed file refused with a
// UsageError that names it, datasets made of directories and globs of shards.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
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

std::string bytes_of(const std::vector<uint32_t>& tokens) {
  return std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
}

// Ids spread over Llama 3's 128,256, most of them past uint16.
std::vector<uint32_t> wide_tokens(size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>((i * 7919 + 65000) % 128256);
  return t;
}

std::vector<int64_t> ids_of(const spmd::TokenFile& file) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < file.num_tokens(); ++i) ids.push_back(file.token(i));
  return ids;
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
  CHECK(nano.width() == spmd::TokenWidth::kU16);
  CHECK(llmc.width() == spmd::TokenWidth::kU16);
  for (size_t i = 0; i < tokens.size(); ++i) {
    CHECK(nano.token(static_cast<int64_t>(i)) == tokens[i]);
    CHECK(llmc.token(static_cast<int64_t>(i)) == tokens[i]);
  }
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
      {"odd.bin", bytes_of(tokens) + "x", "not a whole number of uint16 tokens"},
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
    CHECK(inputs[0] == data->files()[0].token(6));
    CHECK(targets[7] == data->files()[0].token(14));
    strided.copy(31 / 3 + 1, inputs.data(), targets.data());  // the second file's first window
    CHECK(inputs[0] == data->files()[1].token(0));
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

TEST_CASE("data: uint32 ids: a nanoGPT file whose meta.json says so and llm.c's Llama 3 shard hold the same ids") {
  TempDir dir;
  const auto tokens = wide_tokens(1000);
  const std::vector<int64_t> want(tokens.begin(), tokens.end());
  std::filesystem::create_directories(dir.file("nano"));
  spmd::test::write_file(dir.file("nano/train.bin"), bytes_of(tokens));
  spmd::test::write_file(dir.file("nano/meta.json"), R"({"dtype": "uint32"})");
  spmd::test::write_file(dir.file("llmc.bin"), llmc_header(20240801, 7, 1000) + bytes_of(tokens));
  auto nano = spmd::TokenDataset::open(dir.file("nano/train.bin"), 128256);
  auto llmc = spmd::TokenDataset::open(dir.file("llmc.bin"), 128256);
  for (const auto* data : {nano.get(), llmc.get()}) {
    REQUIRE(data->files().size() == 1);
    const spmd::TokenFile& file = data->files()[0];
    CAPTURE(file.path());
    CHECK(file.width() == spmd::TokenWidth::kU32);
    CHECK(ids_of(file) == want);
    // Windows widen the uint32 ids as they are.
    spmd::WindowTable windows(*data, 16);
    std::vector<int64_t> inputs(16), targets(16);
    windows.copy(3, inputs.data(), targets.data());
    CHECK(inputs == std::vector<int64_t>(want.begin() + 48, want.begin() + 64));
    CHECK(targets == std::vector<int64_t>(want.begin() + 49, want.begin() + 65));
  }
  CHECK(nano->files()[0].format() == spmd::TokenFormat::kNanoGpt);
  CHECK(llmc->files()[0].format() == spmd::TokenFormat::kLlmC);
  // Read without its meta.json, the same bytes are uint16 ids, as nanoGPT's files are.
  std::filesystem::remove(dir.file("nano/meta.json"));
  auto narrow = spmd::TokenDataset::open(dir.file("nano/train.bin"), spmd::kAnyTokenId);
  CHECK(narrow->files()[0].width() == spmd::TokenWidth::kU16);
  CHECK(narrow->num_tokens() == 2000);
  // A meta.json without "dtype" (another tool's) leaves them uint16 too.
  spmd::test::write_file(dir.file("nano/meta.json"), R"({"vocab_size": 128256})");
  CHECK(spmd::TokenDataset::open(dir.file("nano/train.bin"), spmd::kAnyTokenId)->num_tokens() == 2000);
}

TEST_CASE("data: a uint32 id at or past the vocabulary is reported with its offset and value") {
  TempDir dir;
  auto tokens = wide_tokens(300);
  tokens[123] = 128256;  // one past Llama 3's last id
  tokens[200] = 4000000000u;
  spmd::test::write_file(dir.file("t.bin"), llmc_header(20240801, 7, 300) + bytes_of(tokens));
  std::string msg = usage_error_of([&] { spmd::TokenFile::open(dir.file("t.bin"), 128256); });
  CHECK(msg.find(dir.file("t.bin")) != std::string::npos);
  CHECK(msg.find("is 128256, not below vocab_size 128256") != std::string::npos);
  CHECK(msg.find(std::to_string(1024 + 123 * 4)) != std::string::npos);  // byte offset
  msg = usage_error_of([&] { spmd::TokenFile::open(dir.file("t.bin"), 128257); });
  CHECK(msg.find("is 4000000000") != std::string::npos);
  CHECK_NOTHROW(spmd::TokenFile::open(dir.file("t.bin"), 4000000001));
  CHECK_NOTHROW(spmd::TokenFile::open(dir.file("t.bin"), spmd::kAnyTokenId));
}

TEST_CASE("data: every malformed uint32 token file is refused naming the file, what was expected and found") {
  TempDir dir;
  const auto tokens = wide_tokens(600);
  struct Bad {
    const char* name;
    std::string contents;
    std::vector<const char*> words;  // the message must contain each
  };
  std::vector<Bad> cases = {
      {"v1.bin",
       llmc_header(20240801, 1, 600) + bytes_of(tokens),
       {"version 1", "magic 20240801", "expected 7", "uint32"}},
      {"v7_magic1.bin", llmc_header(20240520, 7, 600) + bytes_of(tokens), {"version 7", "expected 1", "uint16"}},
      {"count.bin", llmc_header(20240801, 7, 601) + bytes_of(tokens), {"header says 601 tokens", "holds 600 uint32"}},
      {"count16.bin", llmc_header(20240801, 7, 1200) + bytes_of(tokens), {"header says 1200", "holds 600"}},
      {"cut.bin", llmc_header(20240801, 7, 600) + bytes_of(tokens).substr(0, 2398), {"truncated", "uint32", "4 bytes"}},
      {"short_header.bin", llmc_header(20240801, 7, 600).substr(0, 100), {"truncated", "header"}},
      {"magic.bin", llmc_header(20240802, 7, 600) + bytes_of(tokens), {"magic is 20240802", "20240520", "20240801"}},
  };
  for (const auto& bad : cases) {
    CAPTURE(bad.name);
    spmd::test::write_file(dir.file(bad.name), bad.contents);
    std::string msg = usage_error_of([&] { spmd::TokenDataset::open(dir.file(bad.name), 128256); });
    CHECK(msg.find(dir.file(bad.name)) != std::string::npos);
    for (const char* word : bad.words) CHECK_MESSAGE(msg.find(word) != std::string::npos, msg, " lacks ", word);
  }
  // A flat file that meta.json calls uint32 must hold whole uint32 ids.
  std::filesystem::create_directories(dir.file("flat"));
  spmd::test::write_file(dir.file("flat/meta.json"), R"({"dtype": "uint32"})");
  spmd::test::write_file(dir.file("flat/train.bin"), bytes_of(tokens) + "xy");
  std::string msg = usage_error_of([&] { spmd::TokenDataset::open(dir.file("flat/train.bin"), 128256); });
  CHECK(msg.find(dir.file("flat/train.bin")) != std::string::npos);
  CHECK(msg.find("not a whole number of uint32 tokens") != std::string::npos);
  // A dtype this tool does not read, or a meta.json that is not JSON, names the meta.json.
  spmd::test::write_file(dir.file("flat/train.bin"), bytes_of(tokens));
  spmd::test::write_file(dir.file("flat/meta.json"), R"({"dtype": "int64"})");
  msg = usage_error_of([&] { spmd::TokenDataset::open(dir.file("flat/train.bin"), 128256); });
  CHECK(msg.find(dir.file("flat/meta.json")) != std::string::npos);
  CHECK(msg.find("\"int64\"") != std::string::npos);
  spmd::test::write_file(dir.file("flat/meta.json"), "{\"dtype\": ");
  CHECK(usage_error_of([&] { spmd::TokenDataset::open(dir.file("flat/train.bin"), 128256); })
            .find(dir.file("flat/meta.json")) != std::string::npos);
  // An llm.c shard whose width disagrees with the meta.json beside it.
  spmd::test::write_file(dir.file("flat/meta.json"), R"({"dtype": "uint16"})");
  spmd::test::write_file(dir.file("flat/train_000000.bin"), llmc_header(20240801, 7, 600) + bytes_of(tokens));
  msg = usage_error_of([&] { spmd::TokenDataset::open(dir.file("flat/train_*.bin"), 128256); });
  CHECK(msg.find(dir.file("flat/train_000000.bin")) != std::string::npos);
  CHECK(msg.find("uint32 tokens, but the meta.json beside it says dtype uint16") != std::string::npos);
}

TEST_CASE("data: one dataset may mix uint16 and uint32 files: each window is read at its file's width") {
  TempDir dir;
  const auto narrow = iota_tokens(100, 97);
  const auto wide = wide_tokens(80);
  spmd::test::write_file(dir.file("a.bin"), bytes_of(narrow));
  spmd::test::write_file(dir.file("b.bin"), llmc_header(20240801, 7, 80) + bytes_of(wide));
  auto data = spmd::TokenDataset::open(dir.path(), 128256);
  REQUIRE(data->files().size() == 2);
  CHECK(data->files()[0].width() == spmd::TokenWidth::kU16);
  CHECK(data->files()[1].width() == spmd::TokenWidth::kU32);
  spmd::WindowTable windows(*data, 9);  // 11 windows in a.bin (99 / 9), then 8 in b.bin (79 / 9)
  REQUIRE(windows.size() == 11 + 8);
  std::vector<int64_t> inputs(9), targets(9);
  windows.copy(10, inputs.data(), targets.data());
  CHECK(inputs == std::vector<int64_t>(narrow.begin() + 90, narrow.begin() + 99));
  windows.copy(12, inputs.data(), targets.data());
  CHECK(inputs == std::vector<int64_t>(wide.begin() + 9, wide.begin() + 18));
  CHECK(targets == std::vector<int64_t>(wide.begin() + 10, wide.begin() + 19));
  // A loader over it reads every window of an epoch once, each from its own file.
  spmd::DataLoader loader(data, 19, 9, 5, 0, 1, 0);
  spmd::Batch b = loader.next();
  for (int64_t r = 0; r < b.rows; ++r) {
    windows.copy(b.window_ids[r], inputs.data(), targets.data());
    CHECK(std::vector<int64_t>(b.inputs.begin() + r * 9, b.inputs.begin() + (r + 1) * 9) == inputs);
  }
}
