// prepare on corpora: JSON Lines (plain, gzip, zstd; recognised by content) give each line's
// document, checked against the documents encoded one by one; N = 1, 2, 4 workers write the same
// bytes for char, byte, bpe:N and --tokenizer, in one pair of files and in llm.c shards; malformed
// lines name file:line or are counted; shards are files the loader reads.
#include <doctest/doctest.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "tokenizer/bpe.h"
#include "data/meta.h"
#include "prepare/prepare.h"
#include "data/token_file.h"
#include "test_support.h"
#include "usage_error.h"

namespace {

namespace fs = std::filesystem;
using spmd::test::TempDir;
using spmd::test::usage_error_of;
using spmd::test::write_file;

// Documents of random words from several scripts, with a few that break across lines.
std::vector<std::string> make_documents(int count, uint64_t seed) {
  const std::vector<std::string> words = {"the", "quick",  "brown",    "fox's",  "jumps", "ça",
                                          "été", "日本語", "テキスト", "Привет", "мир",   "🎭",
                                          "42",  "3.14",   "--",       "\t",     "don't", "  "};
  std::mt19937_64 rng(seed);
  std::vector<std::string> docs;
  for (int i = 0; i < count; ++i) {
    std::string doc;
    const int n = 1 + static_cast<int>(rng() % 200);
    for (int w = 0; w < n; ++w) doc += words[rng() % words.size()] + (rng() % 9 == 0 ? "\n" : " ");
    docs.push_back(doc);
  }
  return docs;
}

std::string to_jsonl(const std::vector<std::string>& docs, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i)
    out += nlohmann::json{{"id", i}, {"text", docs[i]}, {"meta", {{"url", "x"}}}}.dump() + "\n";
  return out;
}

void write_gzip(const std::string& path, const std::string& data) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, data.data(), static_cast<unsigned>(data.size())) ==
          static_cast<int>(data.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

void write_zstd(const std::string& path, const std::string& data) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 3);
  REQUIRE(!ZSTD_isError(n));
  out.resize(n);
  write_file(path, out);
}

std::vector<int64_t> read_uint16(const std::string& path, size_t header_bytes = 0) {
  const std::string bytes = spmd::test::read_file(path);
  std::vector<int64_t> ids;
  for (size_t i = header_bytes; i + 1 < bytes.size(); i += 2)
    ids.push_back(static_cast<unsigned char>(bytes[i]) |
                  (static_cast<unsigned char>(bytes[i + 1]) << 8));
  return ids;
}

// Every file in dir, name -> contents.
std::map<std::string, std::string> dir_contents(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::directory_iterator(dir))
    out[entry.path().filename().string()] = spmd::test::read_file(entry.path().string());
  return out;
}

spmd::PrepareOptions options_for(const std::vector<std::string>& inputs, const std::string& out) {
  spmd::PrepareOptions options;
  options.inputs = inputs;
  options.out_dir = out;
  return options;
}

// A small BPE vocabulary, everything into train.bin: the documents' bytes come back through decode.
spmd::PrepareOptions bpe_options_for(const std::vector<std::string>& inputs, const std::string& out) {
  auto options = options_for(inputs, out);
  options.vocab = spmd::VocabKind::kBpe;
  options.bpe_merges = 10;
  options.val_fraction = 0;
  return options;
}

}  // namespace

TEST_CASE("corpus: JSON Lines, gzip and zstd give each line's document, <|endoftext|> between") {
  TempDir dir;
  const auto docs = make_documents(600, 1);
  write_file(dir.file("a.jsonl"), to_jsonl(docs, 0, 200));
  write_gzip(dir.file("b.jsonl.gz"), to_jsonl(docs, 200, 400));
  write_zstd(dir.file("c.jsonl.zst"), to_jsonl(docs, 400, 600));

  // Byte vocabulary: the documents' bytes, concatenated.
  auto options = options_for({dir.file("*.jsonl*")}, dir.file("bytes"));
  options.vocab = spmd::VocabKind::kByte;
  options.val_fraction = 0;
  const spmd::DatasetMeta bytes_meta = spmd::prepare(options);
  CHECK(bytes_meta.sources.size() == 3);
  CHECK(bytes_meta.documents == 600);
  std::string expected;
  for (const auto& d : docs) expected += d;
  const auto ids = read_uint16(dir.file("bytes/train.bin"));
  CHECK(std::string(ids.begin(), ids.end()) == expected);

  // BPE: each document encoded alone by the tokenizer, joined by <|endoftext|>.
  options.out_dir = dir.file("bpe");
  options.vocab = spmd::VocabKind::kBpe;
  options.bpe_merges = 300;
  const spmd::DatasetMeta meta = spmd::prepare(options);
  std::vector<int64_t> reference;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i > 0) reference.push_back(meta.bpe->eot_id());
    for (int32_t id : meta.bpe->encode(docs[i])) reference.push_back(id);
  }
  CHECK(read_uint16(dir.file("bpe/train.bin")) == reference);

  // Compression is recognised by content: gzip and zstd files named like plain text.
  fs::copy_file(dir.file("b.jsonl.gz"), dir.file("b.txt"));
  fs::copy_file(dir.file("c.jsonl.zst"), dir.file("c.data"));
  options = options_for({dir.file("b.txt"), dir.file("c.data")}, dir.file("renamed"));
  options.vocab = spmd::VocabKind::kByte;
  options.val_fraction = 0;
  spmd::prepare(options);
  const auto renamed = read_uint16(dir.file("renamed/train.bin"));
  CHECK(std::string(renamed.begin(), renamed.end()) ==
        to_jsonl(docs, 200, 400) + to_jsonl(docs, 400, 600));

  // Concatenated gzip members and zstd frames are read through.
  write_gzip(dir.file("m1.gz"), "first member, ");
  write_gzip(dir.file("m2.gz"), "second member; ");
  write_zstd(dir.file("f1.zst"), "first frame, ");
  write_zstd(dir.file("f2.zst"), "second frame");
  write_file(dir.file("members.txt"), spmd::test::read_file(dir.file("m1.gz")) +
                                          spmd::test::read_file(dir.file("m2.gz")));
  write_file(dir.file("frames.txt"), spmd::test::read_file(dir.file("f1.zst")) +
                                         spmd::test::read_file(dir.file("f2.zst")));
  options = options_for({dir.file("members.txt"), dir.file("frames.txt")}, dir.file("concat"));
  options.vocab = spmd::VocabKind::kByte;
  options.val_fraction = 0;
  spmd::prepare(options);
  const auto concat = read_uint16(dir.file("concat/train.bin"));
  CHECK(std::string(concat.begin(), concat.end()) ==
        "first member, second member; first frame, second frame");
}

TEST_CASE("corpus: 1, 2 and 4 workers write the same bytes (char, byte, bpe:N, --tokenizer)") {
  TempDir dir;
  // Several batches per file: a 2.5 MB JSON Lines file, a text file and a gzip one.
  const auto docs = make_documents(4000, 2);
  fs::create_directories(dir.file("in"));
  write_file(dir.file("in/a.jsonl"), to_jsonl(docs, 0, 3000));
  std::string text;
  for (size_t i = 3000; i < 4000; ++i) text += docs[i];
  write_file(dir.file("in/b.txt"), text + text);
  write_gzip(dir.file("in/c.jsonl.gz"), to_jsonl(docs, 0, 500));
  spmd::prepare([&] {
    auto o = options_for({dir.file("in/b.txt")}, dir.file("tokenizer"));
    o.vocab = spmd::VocabKind::kBpe;
    o.bpe_merges = 200;
    return o;
  }());

  struct Variant {
    const char* name;
    spmd::VocabKind vocab;
    int64_t merges;
    std::string tokenizer_dir;
    int64_t shard_tokens;
  };
  const std::vector<Variant> variants = {
      {"char", spmd::VocabKind::kChar, 0, "", 0},
      {"byte", spmd::VocabKind::kByte, 0, "", 0},
      {"bpe:150", spmd::VocabKind::kBpe, 150, "", 0},
      {"--tokenizer", spmd::VocabKind::kBpe, 0, dir.file("tokenizer"), 0},
      {"--tokenizer, shards", spmd::VocabKind::kBpe, 0, dir.file("tokenizer"), 300000},
  };
  for (const auto& v : variants) {
    std::map<std::string, std::string> first;
    for (int workers : {1, 2, 4}) {
      CAPTURE(v.name);
      CAPTURE(workers);
      const std::string out = dir.file(fmt::format("out-{}-{}", &v - variants.data(), workers));
      auto options = options_for({dir.file("in")}, out);
      options.vocab = v.vocab;
      options.bpe_merges = v.merges;
      options.tokenizer_dir = v.tokenizer_dir;
      options.shard_tokens = v.shard_tokens;
      options.val_fraction = v.shard_tokens > 0 ? 0.1 : 0.05;
      options.workers = workers;
      spmd::prepare(options);
      const auto contents = dir_contents(out);
      if (workers == 1) {
        first = contents;
        CHECK(contents.count("meta.json") == 1);
        CHECK(contents.size() >= (v.shard_tokens > 0 ? 4u : 3u));
      } else {
        CHECK(contents == first);
      }
    }
  }
}

TEST_CASE("corpus: a malformed line names file:line, and --skip-bad-lines counts it") {
  TempDir dir;
  write_file(dir.file("in.jsonl"),
             "{\"text\": \"one\"}\n\n{\"text\": \"two\"}\n{\"text\": 3}\n"
             "{\"body\": \"x\"}\nnot json\n{\"text\": \"three\"}\n");
  auto options = options_for({dir.file("in.jsonl")}, dir.file("out"));
  options.vocab = spmd::VocabKind::kByte;
  const std::string message = usage_error_of([&] { spmd::prepare(options); });
  CHECK(message.find(dir.file("in.jsonl") + ":4: no string field \"text\"") != std::string::npos);
  CHECK(!fs::exists(dir.file("out/meta.json")));

  options.json_key = "body";
  CHECK(usage_error_of([&] { spmd::prepare(options); }).find(":1: no string field \"body\"") !=
        std::string::npos);

  options.json_key = "text";
  options.skip_bad_lines = true;
  options.val_fraction = 0;
  const spmd::DatasetMeta meta = spmd::prepare(options);
  CHECK(meta.skipped_bad_lines == 3);
  CHECK(meta.documents == 3);
  const auto ids = read_uint16(dir.file("out/train.bin"));
  CHECK(std::string(ids.begin(), ids.end()) == "onetwothree");
  const auto json = nlohmann::json::parse(spmd::test::read_file(dir.file("out/meta.json")));
  CHECK(json["skipped_bad_lines"] == 3);
  CHECK(json["documents"] == 3);
}

TEST_CASE("corpus: a text document that is not UTF-8 is encoded as bytes and counted") {
  TempDir dir;
  write_file(dir.file("a.txt"), "plain text\n");
  write_file(dir.file("b.txt"), "latin-1 caf\xe9\n");
  const spmd::DatasetMeta meta = spmd::prepare(bpe_options_for({dir.file("a.txt"), dir.file("b.txt")}, dir.file("out")));
  CHECK(meta.documents == 2);
  CHECK(meta.non_utf8_documents == 1);
  const auto ids = read_uint16(dir.file("out/train.bin"));
  CHECK(meta.bpe->decode(ids) == "plain text\n<|endoftext|>latin-1 caf\xe9\n");
}

TEST_CASE("corpus: a JSON line whose document is not UTF-8 gives the document's own bytes, counted") {
  TempDir dir;
  // Invalid bytes inside the string (a lone 0xE9, a cut-off 0xF4 0x8F), valid non-ASCII beside them.
  write_file(dir.file("in.jsonl"), "{\"text\": \"caf\xe9 na\xc3\xafve \xf4\x8f\", \"id\": 1}\n"
                                   "{\"text\": \"plain\"}\n");
  const spmd::DatasetMeta meta = spmd::prepare(bpe_options_for({dir.file("in.jsonl")}, dir.file("out")));
  CHECK(meta.documents == 2);
  CHECK(meta.non_utf8_documents == 1);
  CHECK(meta.skipped_bad_lines == 0);
  const auto ids = read_uint16(dir.file("out/train.bin"));
  CHECK(meta.bpe->decode(ids) == "caf\xe9 na\xc3\xafve \xf4\x8f<|endoftext|>plain");
  // Invalid bytes outside a string leave the line malformed (file:line, exit 2 from the CLI).
  write_file(dir.file("bad.jsonl"), "{\"text\": \"ok\"}\xff\n");
  CHECK_THROWS_WITH_AS(spmd::prepare(options_for({dir.file("bad.jsonl")}, dir.file("out2"))),
                       doctest::Contains("bad.jsonl:1: not valid JSON"), spmd::UsageError);
}

TEST_CASE(
    "corpus: llm.c shards hold the single file's tokens, val first, and the loader reads them") {
  TempDir dir;
  const auto docs = make_documents(300, 3);
  write_file(dir.file("in.jsonl"), to_jsonl(docs, 0, 300));
  auto options = options_for({dir.file("in.jsonl")}, dir.file("single"));
  options.vocab = spmd::VocabKind::kByte;
  options.val_fraction = 0;
  spmd::prepare(options);
  const auto all = read_uint16(dir.file("single/train.bin"));

  options.out_dir = dir.file("shards");
  options.shard_tokens = 5000;
  options.val_tokens = 7000;
  fs::create_directories(dir.file("shards"));
  write_file(dir.file("shards/train_000099.bin"), "stale");  // an earlier run's: removed
  const spmd::DatasetMeta meta = spmd::prepare(options);
  CHECK(meta.val_tokens == 7000);
  CHECK(meta.train_tokens == static_cast<int64_t>(all.size()) - 7000);
  CHECK(!fs::exists(dir.file("shards/train_000099.bin")));
  CHECK(fs::exists(dir.file("shards/val_000001.bin")));
  CHECK(!fs::exists(dir.file("shards/val_000002.bin")));
  auto val = spmd::TokenDataset::open(dir.file("shards/") + meta.val_file, 256);
  auto train = spmd::TokenDataset::open(dir.file("shards/") + meta.train_file, 256);
  CHECK(val->num_tokens() == 7000);
  std::vector<int64_t> joined;
  for (const auto* data : {val.get(), train.get()})
    for (const auto& file : data->files()) {
      CHECK(file.format() == spmd::TokenFormat::kLlmC);
      CHECK(file.num_tokens() <= 5000);
      CHECK(file.width() == spmd::TokenWidth::kU16);
      for (int64_t i = 0; i < file.num_tokens(); ++i) joined.push_back(file.token(i));
    }
  CHECK(joined == all);

  options.val_tokens = static_cast<int64_t>(all.size());
  CHECK(usage_error_of([&] { spmd::prepare(options); }).find("too few") != std::string::npos);
}

TEST_CASE("corpus: corrupt or truncated compressed input is a usage error naming the file") {
  TempDir dir;
  const std::string data = to_jsonl(make_documents(200, 4), 0, 200);
  write_gzip(dir.file("full.jsonl.gz"), data);
  write_zstd(dir.file("full.jsonl.zst"), data);
  for (const char* name : {"full.jsonl.gz", "full.jsonl.zst"}) {
    const std::string bytes = spmd::test::read_file(dir.file(name));
    const std::string cut = dir.file(std::string("cut-") + name);
    write_file(cut, bytes.substr(0, bytes.size() / 2));
    auto options = options_for({cut}, dir.file("out"));
    options.vocab = spmd::VocabKind::kByte;
    const std::string message = usage_error_of([&] { spmd::prepare(options); });
    CAPTURE(message);
    CHECK(message.find(cut) != std::string::npos);
    CHECK(message.find("truncated") != std::string::npos);
  }
  CHECK(usage_error_of([&] {
          spmd::prepare(options_for({dir.file("nothing-*.jsonl")}, dir.file("out")));
        }).find("no input file matches") != std::string::npos);
}
