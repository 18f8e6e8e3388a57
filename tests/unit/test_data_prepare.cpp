// prepare: text -> tokens -> text round trips for the char and byte vocabularies (non-ASCII
// included), the split, meta.json, input selection and the errors for bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "prepare/input_files.h"
#include "data/meta.h"
#include "prepare/prepare.h"
#include "data/token_file.h"
#include "tokenizer/utf8.h"
#include "test_support.h"
#include "usage_error.h"
#include "util/error.h"

namespace {

using spmd::test::TempDir;
using spmd::test::usage_error_of;

const std::string kText =
    "First Citizen:\nBefore we proceed any further, hear me speak.\n"
    "Ünïcödé: naïve café, Straße, Ελληνικά, 日本語, emoji 🎉 and a clef 𝄞.\n"
    "Tabs\tand\ttabs, \"quotes\" & symbols: ¢£€ — done.\n";

// train.bin followed by val.bin, as token ids.
std::vector<int64_t> read_all_tokens(const std::string& dir) {
  std::vector<int64_t> ids;
  for (const char* name : {"train.bin", "val.bin"}) {
    std::string bytes = spmd::test::read_file(dir + "/" + name);
    REQUIRE(bytes.size() % 2 == 0);
    for (size_t i = 0; i < bytes.size(); i += 2)
      ids.push_back(static_cast<unsigned char>(bytes[i]) |
                    (static_cast<unsigned char>(bytes[i + 1]) << 8));
  }
  return ids;
}

size_t count_code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

TEST_CASE("prepare: char vocabulary round trip, non-ASCII included") {
  TempDir dir;
  spmd::test::write_file(dir.file("in.txt"), kText);
  spmd::PrepareOptions options;
  options.inputs = {dir.file("in.txt")};
  options.out_dir = dir.file("out");
  spmd::DatasetMeta meta = spmd::prepare(options);

  const int64_t n = static_cast<int64_t>(count_code_points(kText));
  CHECK(meta.vocab == spmd::VocabKind::kChar);
  CHECK(meta.train_tokens == static_cast<int64_t>(n * 0.9));
  CHECK(meta.train_tokens + meta.val_tokens == n);
  CHECK(std::is_sorted(meta.chars.begin(), meta.chars.end()));
  CHECK(meta.vocab_size == static_cast<int64_t>(meta.chars.size()));
  CHECK(std::filesystem::file_size(dir.file("out/train.bin")) == size_t(meta.train_tokens) * 2);
  CHECK(!std::filesystem::exists(dir.file("out/train.bin.tmp")));

  // The meta on disk says the same, and decodes the token files back into the text.
  spmd::DatasetMeta loaded = spmd::read_meta(dir.file("out/meta.json"));
  CHECK((loaded.chars == meta.chars));  // compared whole: char32_t has no stream output
  CHECK(loaded.vocab_size == meta.vocab_size);
  CHECK(loaded.sources == std::vector<std::string>{dir.file("in.txt")});
  std::vector<int64_t> ids = read_all_tokens(dir.file("out"));
  CHECK(spmd::decode(loaded, ids) == kText);
  CHECK(spmd::encode(loaded, kText) == ids);
  // The outputs are valid token files for the loader.
  CHECK(spmd::TokenDataset::open(dir.file("out/train.bin"), loaded.vocab_size)->num_tokens() ==
        meta.train_tokens);
}

TEST_CASE("prepare: a char vocabulary of more than 65536 characters writes uint32 ids") {
  TempDir dir;
  std::string text;  // 42,720 CJK Extension B characters and 28,000 others: 70,720 distinct
  for (char32_t cp = 0x20000; cp < 0x2A6E0; ++cp) spmd::utf8_append(text, cp);
  for (char32_t cp = 0x4E00; cp < 0x4E00 + 28000; ++cp) spmd::utf8_append(text, cp);
  text += text;  // twice, so val repeats train's characters
  spmd::test::write_file(dir.file("in.txt"), text);
  spmd::PrepareOptions options;
  options.inputs = {dir.file("in.txt")};
  options.out_dir = dir.file("out");
  const spmd::DatasetMeta meta = spmd::prepare(options);
  CHECK(meta.vocab_size == 70720);
  CHECK(meta.token_width == spmd::TokenWidth::kU32);
  CHECK(std::filesystem::file_size(dir.file("out/train.bin")) == size_t(meta.train_tokens) * 4);
  const spmd::DatasetMeta loaded = spmd::read_meta(dir.file("out/meta.json"));
  CHECK(loaded.token_width == spmd::TokenWidth::kU32);
  std::vector<int64_t> ids;
  for (const char* name : {"out/train.bin", "out/val.bin"}) {
    const auto data = spmd::TokenDataset::open(dir.file(name), loaded.vocab_size);
    for (const auto& file : data->files())
      for (int64_t i = 0; i < file.num_tokens(); ++i) ids.push_back(file.token(i));
  }
  CHECK(spmd::decode(loaded, ids) == text);
  CHECK(*std::max_element(ids.begin(), ids.end()) == 70719);
}

TEST_CASE("prepare: byte vocabulary round trip takes any bytes") {
  TempDir dir;
  std::string text = kText + std::string("\xff\xfe\x00 raw \xc0\x80", 11);
  spmd::test::write_file(dir.file("in.bin"), text);
  spmd::PrepareOptions options;
  options.inputs = {dir.file("in.bin")};
  options.out_dir = dir.file("out");
  options.vocab = spmd::VocabKind::kByte;
  options.val_fraction = 0.25;
  spmd::DatasetMeta meta = spmd::prepare(options);
  CHECK(meta.vocab_size == 256);
  CHECK(meta.train_tokens == static_cast<int64_t>(text.size() * 0.75));
  spmd::DatasetMeta loaded = spmd::read_meta(dir.file("out/meta.json"));
  CHECK(loaded.vocab == spmd::VocabKind::kByte);
  CHECK(spmd::decode(loaded, read_all_tokens(dir.file("out"))) == text);
}

TEST_CASE("prepare: invalid UTF-8 for a char vocabulary names the file and byte offset") {
  TempDir dir;
  spmd::test::write_file(dir.file("bad.txt"), "good text \xe2\x82 broken");
  spmd::PrepareOptions options;
  options.inputs = {dir.file("bad.txt")};
  options.out_dir = dir.file("out");
  std::string msg = usage_error_of([&] { spmd::prepare(options); });
  CHECK(msg.find(dir.file("bad.txt")) != std::string::npos);
  CHECK(msg.find("byte offset 10") != std::string::npos);
  CHECK(!std::filesystem::exists(dir.file("out/meta.json")));
}

TEST_CASE("prepare: strict UTF-8 decoding") {
  auto decodes = [](const std::string& s) {
    char32_t cp = 0;
    return spmd::utf8_decode_one(reinterpret_cast<const unsigned char*>(s.data()), s.size(), cp);
  };
  CHECK(decodes("\xc3\xa9") == 2);
  CHECK(decodes("\xf0\x9d\x84\x9e") == 4);
  CHECK(decodes("\xc0\x80") == 0);          // overlong NUL
  CHECK(decodes("\xe0\x80\xaf") == 0);      // overlong
  CHECK(decodes("\xed\xa0\x80") == 0);      // surrogate
  CHECK(decodes("\xf4\x90\x80\x80") == 0);  // above U+10FFFF
  CHECK(decodes("\xe2\x82") == 0);          // cut off
  CHECK(decodes("\x80") == 0);              // lone continuation byte
  for (char32_t cp : {char32_t(0x41), char32_t(0x7FF), char32_t(0xFFFD), char32_t(0x10FFFF)}) {
    std::string s;
    spmd::utf8_append(s, cp);
    char32_t back = 0;
    CHECK(spmd::utf8_decode_one(reinterpret_cast<const unsigned char*>(s.data()), s.size(), back) ==
          s.size());
    CHECK(back == cp);
  }
}

TEST_CASE("prepare: directories are walked in order, minus excluded globs") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("corpus/off"));
  spmd::test::write_file(dir.file("corpus/b"), "bbb\n");
  spmd::test::write_file(dir.file("corpus/a"), "aaa\n");
  spmd::test::write_file(dir.file("corpus/a.dat"), "\x01\x02 index");
  spmd::test::write_file(dir.file("corpus/off/c"), "offensive\n");
  spmd::test::write_file(dir.file("corpus/.hidden"), "hidden\n");
  spmd::test::write_file(dir.file("extra.txt"), "extra\n");
  auto files = spmd::collect_input_files({dir.file("corpus"), dir.file("extra.txt")},
                                         {"*.dat", "off"});
  CHECK(files == std::vector<std::string>{dir.file("corpus/a"), dir.file("corpus/b"),
                                          dir.file("extra.txt")});
  CHECK(spmd::collect_input_files({dir.file("corpus")}, {"off/*", "*.dat"}).size() == 2);
  CHECK(spmd::collect_input_files({dir.file("corpus"), dir.file("corpus/a")}, {}).size() == 4);

  spmd::PrepareOptions options;
  options.inputs = {dir.file("corpus"), dir.file("extra.txt")};
  options.exclude = {"*.dat", "off"};
  options.out_dir = dir.file("out");
  options.val_fraction = 0.5;
  spmd::DatasetMeta meta = spmd::prepare(options);
  CHECK(spmd::decode(meta, read_all_tokens(dir.file("out"))) == "aaa\nbbb\nextra\n");
}

TEST_CASE("prepare: missing, empty and too small inputs are usage errors") {
  TempDir dir;
  spmd::PrepareOptions options;
  options.out_dir = dir.file("out");
  options.inputs = {dir.file("missing.txt")};
  CHECK(usage_error_of([&] { spmd::prepare(options); }).find("missing.txt") != std::string::npos);
  spmd::test::write_file(dir.file("empty.txt"), "");
  options.inputs = {dir.file("empty.txt")};
  CHECK(usage_error_of([&] { spmd::prepare(options); }).find("empty") != std::string::npos);
  spmd::test::write_file(dir.file("one.txt"), "x");
  options.inputs = {dir.file("one.txt")};
  CHECK_THROWS_AS(spmd::prepare(options), spmd::UsageError);
  options.inputs = {dir.file("one.txt")};
  options.val_fraction = 1.0;
  CHECK_THROWS_AS(spmd::prepare(options), spmd::UsageError);
  options.inputs = {dir.path()};
  options.exclude = {"*.txt"};
  options.val_fraction = 0.1;
  CHECK_THROWS_AS(spmd::prepare(options), spmd::UsageError);
}

TEST_CASE("prepare: decode and encode refuse what the vocabulary lacks") {
  spmd::DatasetMeta meta;
  meta.chars = {U'a', U'b', U'é'};
  meta.vocab_size = 3;
  CHECK(spmd::decode(meta, {0, 2, 1}) == "aéb");
  CHECK_THROWS_AS(spmd::decode(meta, {3}), spmd::UsageError);
  CHECK_THROWS_AS(spmd::encode(meta, "abc"), spmd::UsageError);
  CHECK(spmd::encode(meta, "éa") == std::vector<int64_t>{2, 0});
}
