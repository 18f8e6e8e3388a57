// BPE end to end in lib/data: training is deterministic and breaks ties as documented; prepare
// writes tokens with <|endoftext|> between files plus vocab.json/merges.txt/meta.json that
// read_meta loads back; broken tokenizer files are UsageErrors that name the file (and line).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "bpe_test_text.h"
#include "tokenizer/bpe.h"
#include "tokenizer/bpe_files.h"
#include "tokenizer/bpe_train.h"
#include "tokenizer/byte_unicode.h"
#include "data/meta.h"
#include "data/token_file.h"
#include "prepare/prepare.h"
#include "test_support.h"
#include "usage_error.h"
#include "wide_tokenizer.h"

namespace {

using spmd::test::TempDir;
using spmd::test::usage_error_of;
using spmd::test::write_file;

std::vector<std::string> merge_strings(const spmd::BpeTokenizer& t) {
  std::vector<std::string> out;
  for (const auto& m : t.merges()) out.push_back(t.tokens()[m.result].bytes);
  return out;
}

std::vector<int64_t> read_tokens(const std::string& dir) {
  std::vector<int64_t> ids;
  for (const char* name : {"train.bin", "val.bin"}) {
    const std::string bytes = spmd::test::read_file(dir + "/" + name);
    for (size_t i = 0; i + 1 < bytes.size(); i += 2)
      ids.push_back(static_cast<unsigned char>(bytes[i]) |
                    (static_cast<unsigned char>(bytes[i + 1]) << 8));
  }
  return ids;
}

// A vocab.json with the 256 bytes (ids 0..255) plus `extra` tokens.
nlohmann::json byte_vocab(const std::vector<std::string>& extra = {}) {
  nlohmann::json v = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) v[spmd::bytes_to_unicode_string(std::string(1, char(b)))] = b;
  for (const auto& t : extra) {
    const size_t id = v.size();
    v[t] = id;
  }
  return v;
}

}  // namespace

TEST_CASE("bpe: training is deterministic, ties go to the smallest pair of byte strings") {
  spmd::BpeTrainer a, b;
  a.add_text("cd ab");
  // Words " ab" and "cd": every pair counts 1, so the order is by bytes: ' ' < 'a' < 'c'.
  CHECK(merge_strings(a.train(10)) == std::vector<std::string>{" a", " ab", "cd"});
  spmd::BpeTrainer counts;
  counts.add_text("zz zz zz ab");  // (z, z) counts 3 and wins over smaller pairs
  CHECK(merge_strings(counts.train(1)) == std::vector<std::string>{"zz"});

  // The same text in other chunks (cut at safe places) learns the same merges.
  const std::string& text = spmd::test::kMultiScriptText;
  spmd::BpeTrainer whole, chunked;
  whole.add_text(text);
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = spmd::next_safe_cut(text, pos + 50);
    chunked.add_text(std::string_view(text).substr(pos, end - pos));
    pos = end;
  }
  const auto m1 = merge_strings(whole.train(500));
  CHECK(m1 == merge_strings(chunked.train(500)));
  CHECK(m1 == merge_strings(whole.train(500)));
  const spmd::BpeTokenizer t = whole.train(500);
  CHECK(t.vocab_size() == 256 + 500 + 1);
  CHECK(t.eot_id() == 756);
}

TEST_CASE("bpe: training stops early when no pair is left") {
  spmd::BpeTrainer trainer;
  trainer.add_text("abc");
  const spmd::BpeTokenizer t = trainer.train(100);
  CHECK(merge_strings(t) == std::vector<std::string>{"ab", "abc"});
  CHECK(t.vocab_size() == 259);
}

TEST_CASE("bpe: prepare writes tokens with <|endoftext|> between files and a loadable tokenizer") {
  TempDir dir;
  write_file(dir.file("a.txt"), spmd::test::kMultiScriptText);
  write_file(dir.file("b.txt"), "Second document: naïve ünïcödé 🎉\n");
  spmd::PrepareOptions options;
  options.inputs = {dir.file("a.txt"), dir.file("b.txt")};
  options.out_dir = dir.file("out");
  options.vocab = spmd::VocabKind::kBpe;
  options.bpe_merges = 200;
  const spmd::DatasetMeta written = spmd::prepare(options);
  CHECK(written.vocab_size == 457);

  const spmd::DatasetMeta meta = spmd::read_meta(dir.file("out/meta.json"));
  REQUIRE(meta.vocab == spmd::VocabKind::kBpe);
  CHECK(meta.vocab_size == 457);
  CHECK(meta.eot_token == 456);
  CHECK(spmd::tokenizer_files(meta) ==
        std::vector<std::string>{"meta.json", "vocab.json", "merges.txt"});
  for (const auto& f : spmd::tokenizer_files(meta)) CHECK(std::filesystem::exists(dir.file("out/" + f)));

  std::vector<int64_t> expected = spmd::encode(meta, spmd::test::kMultiScriptText);
  expected.push_back(meta.eot_token);
  for (int64_t id : spmd::encode(meta, "Second document: naïve ünïcödé 🎉\n")) expected.push_back(id);
  CHECK(read_tokens(dir.file("out")) == expected);
  CHECK(meta.train_tokens + meta.val_tokens == static_cast<int64_t>(expected.size()));
  CHECK(spmd::decode(meta, expected) ==
        spmd::test::kMultiScriptText + "<|endoftext|>Second document: naïve ünïcödé 🎉\n");
  // A cut UTF-8 sequence decodes to its bytes rather than failing.
  CHECK(spmd::decode(meta, {0xC3}) == "\xC3");
  CHECK(usage_error_of([&] { spmd::decode(meta, {457}); }).find("outside") != std::string::npos);

  spmd::DatasetMeta chars;  // char and byte metas are defined by meta.json alone
  CHECK(spmd::tokenizer_files(chars) == std::vector<std::string>{"meta.json"});
}

TEST_CASE("bpe: prepare with Hugging Face files normalizes them into the output") {
  TempDir dir;
  write_file(dir.file("in.txt"), "abab abab\n");
  std::filesystem::create_directories(dir.file("tok"));
  write_file(dir.file("tok/vocab.json"), byte_vocab({"ab", "abab", "<|endoftext|>"}).dump());
  write_file(dir.file("tok/merges.txt"), "#version: 0.2\na b\r\nab ab\n");
  spmd::PrepareOptions options;
  options.inputs = {dir.file("in.txt")};
  options.out_dir = dir.file("out");
  options.vocab = spmd::VocabKind::kBpe;
  options.tokenizer_dir = dir.file("tok");
  options.val_fraction = 0;
  const spmd::DatasetMeta meta = spmd::prepare(options);
  CHECK(meta.vocab_size == 259);
  CHECK(meta.eot_token == 258);
  // "abab", " ", "abab", "\n"
  CHECK(read_tokens(dir.file("out")) == std::vector<int64_t>{257, ' ', 257, '\n'});
  CHECK(spmd::test::read_file(dir.file("out/merges.txt")) == "#version: 0.2\na b\nab ab\n");
  CHECK(spmd::read_meta(dir.file("out/meta.json")).vocab_size == 259);
}

TEST_CASE("bpe: broken tokenizer files are usage errors naming the file") {
  TempDir dir;
  const std::string vocab = dir.file("vocab.json"), merges = dir.file("merges.txt");
  auto error = [&](const std::string& vocab_text, const std::string& merges_text) {
    write_file(vocab, vocab_text);
    write_file(merges, merges_text);
    return usage_error_of([&] { spmd::read_vocab_and_merges(vocab, merges); });
  };
  const std::string good = byte_vocab({"ab"}).dump();
  CHECK(error("{not json", "a b\n").find(vocab) != std::string::npos);
  CHECK(error("[1, 2]", "a b\n").find(vocab) != std::string::npos);
  CHECK(error(R"({"a": 0, "b": 0})", "").find("each used once") != std::string::npos);
  CHECK(error(R"({"a": "x"})", "").find("not an integer") != std::string::npos);
  CHECK(error(R"({"a": 0.5})", "").find("id of token \"a\" is not an integer") != std::string::npos);
  CHECK(error(R"({"a": {"b": 0}})", "").find("id of token \"a\" is not an integer") != std::string::npos);
  CHECK(error(R"({"a": 1, "a": 0})", "").find(vocab + ": token \"a\" appears twice") != std::string::npos);
  CHECK(error(R"({"a": 0} x)", "").find(vocab + ": not valid JSON") != std::string::npos);
  CHECK(error(R"({"a": 0})", "").find(vocab + ": no token for the single byte 0x00") !=
        std::string::npos);
  CHECK(error(good, "#version: 0.2\na b\na b c\n").find(merges + ":3") != std::string::npos);
  CHECK(error(good, "a b\nx yz\n").find(merges + ":2: merge token \"yz\"") != std::string::npos);
  CHECK(error(good, "a b\nab ab\n").find(merges + ":2: merge token \"abab\"") != std::string::npos);
  write_file(merges, "a b\n");
  std::filesystem::remove(vocab);
  CHECK(usage_error_of([&] { spmd::read_vocab_and_merges(vocab, merges); }).find(vocab) !=
        std::string::npos);

  const std::string tj = dir.file("tokenizer.json");
  auto json_error = [&](const nlohmann::json& j) {
    write_file(tj, j.dump());
    return usage_error_of([&] { spmd::read_tokenizer_json(tj); });
  };
  const nlohmann::json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  CHECK(json_error({{"model", {{"vocab", byte_vocab({"ab"})}, {"merges", {{"a", "b", "c"}}}}},
                    {"pre_tokenizer", pre}})
            .find(tj + ": model.merges[0]") != std::string::npos);
  CHECK(json_error({{"model", {{"vocab", byte_vocab()}, {"merges", nlohmann::json::array()}}},
                    {"pre_tokenizer", pre},
                    {"normalizer", {{"type", "NFC"}}}})
            .find("normalizer") != std::string::npos);
  CHECK(json_error({{"model", {{"type", "WordPiece"}}}}).find("BPE") != std::string::npos);
  CHECK(json_error({{"no_model", 1}}).find(tj) != std::string::npos);
  CHECK(usage_error_of([&] { spmd::read_tokenizer_dir(dir.file("missing")); })
            .find(dir.file("missing")) != std::string::npos);
  std::filesystem::remove(tj);
  std::filesystem::remove(merges);
  CHECK(usage_error_of([&] { spmd::read_tokenizer_dir(dir.path()); }).find("tokenizer.json") !=
        std::string::npos);
}

TEST_CASE("bpe: a tokenizer past 65536 ids writes uint32 ids, files and llm.c shards alike") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("big"));
  spmd::test::write_wide_tokenizer(dir.file("big"), 70000, {"The", " cat", " sat", " on", " the", " mat"});
  std::string line = "The cat sat on the mat.\n", doc;
  for (int i = 0; i < 40; ++i) doc += line;
  write_file(dir.file("a.txt"), doc);
  write_file(dir.file("b.txt"), doc + "the end");
  spmd::PrepareOptions options;
  options.inputs = {dir.file("a.txt"), dir.file("b.txt")};
  options.out_dir = dir.file("out");
  options.vocab = spmd::VocabKind::kBpe;
  options.tokenizer_dir = dir.file("big");
  const spmd::DatasetMeta meta = spmd::prepare(options);
  CHECK(meta.vocab_size == 70000);
  CHECK(meta.token_width == spmd::TokenWidth::kU32);
  CHECK(nlohmann::json::parse(spmd::test::read_file(dir.file("out/meta.json")))["dtype"] == "uint32");
  CHECK(std::filesystem::file_size(dir.file("out/train.bin")) == static_cast<uintmax_t>(meta.train_tokens) * 4);

  // The ids: each document as the tokenizer encodes it, <|endoftext|> (69999) between them.
  const spmd::DatasetMeta loaded = spmd::read_meta(dir.file("out/meta.json"));
  CHECK(loaded.token_width == spmd::TokenWidth::kU32);
  std::vector<int64_t> want = spmd::encode(loaded, doc);
  want.push_back(69999);
  for (int64_t id : spmd::encode(loaded, doc + "the end")) want.push_back(id);
  CHECK(*std::max_element(want.begin(), want.end()) > 65535);
  auto ids_of = [](const std::string& spec) {
    std::vector<int64_t> ids;
    const auto data = spmd::TokenDataset::open(spec, 70000);
    for (const auto& file : data->files()) {
      CHECK(file.width() == spmd::TokenWidth::kU32);
      for (int64_t i = 0; i < file.num_tokens(); ++i) ids.push_back(file.token(i));
    }
    return ids;
  };
  std::vector<int64_t> got = ids_of(dir.file("out/train.bin"));
  for (int64_t id : ids_of(dir.file("out/val.bin"))) got.push_back(id);
  CHECK(got == want);

  // llm.c shards: Llama 3's header (magic 20240801, version 7), val first.
  options.out_dir = dir.file("shards");
  options.shard_tokens = 100;
  options.val_tokens = 150;
  const spmd::DatasetMeta sharded = spmd::prepare(options);
  CHECK(sharded.token_width == spmd::TokenWidth::kU32);
  const std::string header = spmd::test::read_file(dir.file("shards/val_000000.bin")).substr(0, 12);
  int32_t words[3];
  std::memcpy(words, header.data(), 12);
  CHECK(words[0] == 20240801);
  CHECK(words[1] == 7);
  CHECK(words[2] == 100);
  got = ids_of(dir.file("shards/val_*.bin"));
  CHECK(got.size() == 150);
  for (int64_t id : ids_of(dir.file("shards/train_*.bin"))) got.push_back(id);
  CHECK(got == want);
}

TEST_CASE("bpe: bpe:N past int32 ids is refused") {
  TempDir dir;
  write_file(dir.file("in.txt"), "some text\n");
  spmd::PrepareOptions options;
  options.inputs = {dir.file("in.txt")};
  options.out_dir = dir.file("out");
  options.vocab = spmd::VocabKind::kBpe;
  options.bpe_merges = 2147483647;
  CHECK(usage_error_of([&] { spmd::prepare(options); }).find("bpe:2147483647") != std::string::npos);
  CHECK(!std::filesystem::exists(dir.file("out/meta.json")));
}
