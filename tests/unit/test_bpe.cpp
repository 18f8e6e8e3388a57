// Byte-level BPE: the byte <-> unicode map, GPT-2's pre-tokenizer splits, encode/decode round
// trips for many scripts and for random bytes (invalid UTF-8 included), and the Hugging Face files
// (written, read back, tokenizer.json variants).
#include <doctest/doctest.h>

#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "bpe_test_text.h"
#include "tokenizer/bpe.h"
#include "tokenizer/bpe_files.h"
#include "tokenizer/bpe_train.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/pretokenize.h"
#include "test_support.h"

namespace {

using spmd::test::TempDir;

std::vector<std::string> split_words(const std::string& text) {
  spmd::Pretokenizer pre;
  std::vector<std::string_view> views;
  pre.split(text, views);
  return {views.begin(), views.end()};
}

std::string decode32(const spmd::BpeTokenizer& t, const std::vector<int32_t>& ids) {
  return t.decode(std::vector<int64_t>(ids.begin(), ids.end()));
}

}  // namespace

TEST_CASE("bpe: the byte map matches GPT-2's and inverts") {
  const auto& map = spmd::byte_to_unicode();
  CHECK(map[' '] == 0x120);   // 'Ġ'
  CHECK(map['\n'] == 0x10A);  // 'Ċ'
  CHECK(map['a'] == U'a');
  CHECK(map[0xAD] == 0x143);  // soft hyphen, the last unprintable Latin-1 byte
  CHECK(std::set<char32_t>(map.begin(), map.end()).size() == 256);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string back;
  REQUIRE(spmd::unicode_string_to_bytes(spmd::bytes_to_unicode_string(all), back));
  CHECK(back == all);
  CHECK_FALSE(spmd::unicode_string_to_bytes("a b", back));  // ' ' is not a byte's image
  CHECK_FALSE(spmd::unicode_string_to_bytes("\xff", back));
}

TEST_CASE("bpe: the pre-tokenizer splits as GPT-2's pattern") {
  CHECK(split_words("Hello world's  test\n\n 123 !!") ==
        std::vector<std::string>{"Hello", " world", "'s", " ", " test", "\n\n", " 123", " !!"});
  CHECK(split_words("we'll they're I'M") ==
        std::vector<std::string>{"we", "'ll", " they", "'re", " I", "'", "M"});
  CHECK(split_words("Ελληνικά καλά 日本語 ١٢٣") ==
        std::vector<std::string>{"Ελληνικά", " καλά", " 日本語", " ١٢٣"});
  CHECK(split_words("trailing   ") == std::vector<std::string>{"trailing", "   "});
  // \s is Unicode White_Space (as tokenizers): VT and NEL are spaces, U+180E and U+001C are not.
  CHECK(split_words("a\v\vb\u0085\u0085c") ==
        std::vector<std::string>{"a", "\v", "\v", "b", "\u0085", "\u0085", "c"});
  CHECK(split_words("a\u180e\u180eb\x1c\x1c") ==
        std::vector<std::string>{"a", "\u180e\u180e", "b", "\x1c\x1c"});
  // Invalid UTF-8 bytes form words of their own.
  CHECK(split_words("a\xff\xfe" "b \xc3") == std::vector<std::string>{"a", "\xff\xfe", "b", " ", "\xc3"});
}

TEST_CASE("bpe: the pre-tokenizer's words cover any bytes, and safe cuts change no word") {
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    const std::string text = spmd::test::random_text(rng, 200);
    std::string joined;
    for (const auto& w : split_words(text)) {
      CHECK(!w.empty());
      joined += w;
    }
    CHECK(joined == text);
    std::vector<std::string> pieces;
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = spmd::next_safe_cut(text, pos + 1 + rng() % 40);
      for (auto& w : split_words(text.substr(pos, end - pos))) pieces.push_back(w);
      pos = end;
    }
    CHECK(pieces == split_words(text));
  }
}

TEST_CASE("bpe: decode(encode(x)) == x for many scripts and for random bytes") {
  spmd::BpeTrainer trainer;
  trainer.add_text(spmd::test::kMultiScriptText);
  const spmd::BpeTokenizer tok = trainer.train(400);
  CHECK(tok.merges().size() == 400);
  for (const std::string& s : spmd::test::kScriptSamples) {
    INFO(s);
    const auto ids = tok.encode(s);
    CHECK(decode32(tok, ids) == s);
    if (s.size() > 4) CHECK(ids.size() < s.size());  // merges were applied
  }
  std::mt19937 rng(11);
  spmd::BpeEncoder encoder(tok);
  for (int round = 0; round < 2000; ++round) {
    const std::string text = spmd::test::random_text(rng, 80);
    const auto ids = tok.encode(text);
    CHECK(decode32(tok, ids) == text);
    std::vector<int32_t> cached;
    encoder.encode(text, cached);
    CHECK(cached == ids);
    for (int32_t id : ids) CHECK(id != tok.eot_id());
  }
  CHECK(tok.decode({tok.eot_id()}) == "<|endoftext|>");
  const auto literal = tok.encode("a <|endoftext|> b");  // ordinary text, never the eot id
  CHECK(std::find(literal.begin(), literal.end(), tok.eot_id()) == literal.end());
}

TEST_CASE("bpe: a megabyte-long word encodes quickly and exactly") {
  spmd::BpeTrainer trainer;
  trainer.add_text("aaaa abab aaaa abab");
  const spmd::BpeTokenizer tok = trainer.train(10);
  const std::string word(1 << 20, 'a');
  const auto ids = tok.encode(word);
  CHECK(decode32(tok, ids) == word);
  CHECK(ids.size() <= word.size() / 4);
}

TEST_CASE("bpe: vocab.json + merges.txt and tokenizer.json read back the same tokenizer") {
  TempDir dir;
  spmd::BpeTrainer trainer;
  trainer.add_text(spmd::test::kMultiScriptText);
  const spmd::BpeTokenizer tok = trainer.train(300);
  spmd::write_vocab_and_merges(tok, dir.path());
  const std::string merges = spmd::test::read_file(dir.file("merges.txt"));
  CHECK(merges.rfind("#version: 0.2\n", 0) == 0);
  const spmd::BpeTokenizer back =
      spmd::read_vocab_and_merges(dir.file("vocab.json"), dir.file("merges.txt"));
  CHECK(back.vocab_size() == tok.vocab_size());
  CHECK(back.eot_id() == tok.eot_id());
  CHECK(back.merges().size() == tok.merges().size());

  // tokenizer.json with merges as "a b" strings and as [a, b] pairs.
  const auto vocab = nlohmann::json::parse(spmd::test::read_file(dir.file("vocab.json")));
  nlohmann::json strings = nlohmann::json::array(), pairs = nlohmann::json::array();
  const std::string lines = merges.substr(merges.find('\n') + 1);
  for (size_t pos = 0, end; (end = lines.find('\n', pos)) != std::string::npos; pos = end + 1) {
    const std::string line = lines.substr(pos, end - pos);
    strings.push_back(line);
    pairs.push_back({line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1)});
  }
  for (const auto& list : std::vector<nlohmann::json>{strings, pairs}) {
    nlohmann::json j = {{"normalizer", nullptr},
                        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", list}}}};
    spmd::test::write_file(dir.file("tokenizer.json"), j.dump());
    const spmd::BpeTokenizer from_json = spmd::read_tokenizer_json(dir.file("tokenizer.json"));
    for (const std::string& s : spmd::test::kScriptSamples) CHECK(from_json.encode(s) == tok.encode(s));
  }
}

TEST_CASE("bpe: a vocabulary without <|endoftext|> gets it as the last id") {
  TempDir dir;
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[spmd::bytes_to_unicode_string(std::string(1, char(b)))] = b;
  vocab["ab"] = 256;
  spmd::test::write_file(dir.file("vocab.json"), vocab.dump());
  spmd::test::write_file(dir.file("merges.txt"), "a b\n");
  const spmd::BpeTokenizer tok = spmd::read_tokenizer_dir(dir.path());
  CHECK(tok.vocab_size() == 258);
  CHECK(tok.eot_id() == 257);
  CHECK(tok.encode("abc") == std::vector<int32_t>{256, 'c'});
}
