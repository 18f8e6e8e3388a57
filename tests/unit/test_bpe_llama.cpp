// A Llama 3 style tokenizer.json: its Split pattern read from the file, added tokens found in the
// text, ignore_merges, a <|begin_of_text|> template that starts every document (the first too),
// the dataset keeping the file and sample's prompt starting with the token; unsupported fields are usage errors naming the file and the field.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "generate/sample_run.h"

#include "doctest_check.h"

#include "tokenizer/bpe.h"
#include "tokenizer/bpe_files.h"
#include "tokenizer/byte_unicode.h"
#include "data/meta.h"
#include "prepare/prepare.h"
#include "test_support.h"
#include "usage_error.h"

namespace {

using spmd::test::TempDir;
using spmd::test::usage_error_of;
using spmd::test::write_file;
using Json = nlohmann::json;

constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// 256 byte tokens, "ab" (256) and "abc" (257, no merge makes it), merge a+b; then two special
// tokens outside model.vocab and a template starting with <|begin_of_text|>, as Llama 3's file.
Json llama_style_json() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[spmd::bytes_to_unicode_string(std::string(1, char(b)))] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  Json added = Json::array();
  for (const auto& [id, text] : std::vector<std::pair<int, std::string>>{{258, "<|begin_of_text|>"},
                                                                        {259, "<|end_of_text|>"}})
    added.push_back({{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  const Json template_single = Json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}});
  return {{"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
          {"post_processor",
           {{"type", "Sequence"},
            {"processors",
             {{{"type", "ByteLevel"}, {"trim_offsets", false}},
              {{"type", "TemplateProcessing"}, {"single", template_single}}}}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", vocab}, {"merges", {"a b"}}}}};
}

std::string error_of(const TempDir& dir, const Json& j) {
  write_file(dir.file("tokenizer.json"), j.dump());
  return usage_error_of([&] { spmd::read_tokenizer_json(dir.file("tokenizer.json")); });
}

}  // namespace

TEST_CASE("bpe llama: the file's split pattern, added tokens in text, ignore_merges, the start token") {
  TempDir dir;
  write_file(dir.file("tokenizer.json"), llama_style_json().dump());
  const spmd::BpeTokenizer tok = spmd::read_tokenizer_json(dir.file("tokenizer.json"));
  CHECK(tok.vocab_size() == 260);  // no <|endoftext|> appended: the template names the separator
  CHECK(tok.eot_id() == 258);
  CHECK(tok.rules().eot_starts_documents);
  CHECK(!tok.gpt2_rules());
  // Llama 3's pattern: digits in threes, a letter run takes one leading non-letter ("_ab").
  CHECK(tok.encode("12345") == std::vector<int32_t>{'1', '2', '3', '4', '5'});
  std::vector<std::string_view> words;
  spmd::Pretokenizer(tok.rules().pattern).split("12345_abc I'M", words);
  CHECK(words == std::vector<std::string_view>{"123", "45", "_abc", " I", "'M"});
  // ignore_merges: "abc" is a token although no merge makes it.
  CHECK(tok.encode("abc") == std::vector<int32_t>{257});
  CHECK(tok.encode("abd") == std::vector<int32_t>{256, 'd'});
  // Special tokens written in the text are those tokens, the longest match first.
  CHECK(tok.encode("x<|end_of_text|><|begin_of_text|>ab<|begin_of_text") ==
        std::vector<int32_t>{'x', 259, 258, 256, '<', '|', 'b', 'e', 'g', 'i', 'n', '_', 'o', 'f', '_', 't', 'e',
                             'x', 't'});
  spmd::BpeEncoder encoder(tok);
  std::vector<int32_t> cached;
  encoder.encode("<|end_of_text|>abc abc", cached);
  CHECK(cached == tok.encode("<|end_of_text|>abc abc"));
  CHECK(tok.decode({258, 257, 259}) == "<|begin_of_text|>abc<|end_of_text|>");
}

TEST_CASE("bpe llama: prepare starts every document with the start token and keeps the tokenizer.json") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("tok"));
  write_file(dir.file("tok/tokenizer.json"), llama_style_json().dump());
  write_file(dir.file("a.txt"), "abc");
  write_file(dir.file("b.txt"), "ab<|end_of_text|>");
  spmd::PrepareOptions options;
  options.inputs = {dir.file("a.txt"), dir.file("b.txt")};
  options.out_dir = dir.file("out");
  options.vocab = spmd::VocabKind::kBpe;
  options.tokenizer_dir = dir.file("tok");
  options.val_fraction = 0;
  const spmd::DatasetMeta meta = spmd::prepare(options);
  CHECK(meta.eot_token == 258);
  CHECK(meta.vocab_size == 260);
  const std::string bytes = spmd::test::read_file(dir.file("out/train.bin"));
  std::vector<int64_t> ids;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2)
    ids.push_back(static_cast<unsigned char>(bytes[i]) | (static_cast<unsigned char>(bytes[i + 1]) << 8));
  CHECK(ids == std::vector<int64_t>{258, 257, 258, 256, 259});
  CHECK(spmd::test::read_file(dir.file("out/tokenizer.json")) == llama_style_json().dump());
  CHECK(!std::filesystem::exists(dir.file("out/vocab.json")));
  const spmd::DatasetMeta back = spmd::read_meta(dir.file("out/meta.json"));
  CHECK(spmd::tokenizer_files(back) == std::vector<std::string>{"meta.json", "tokenizer.json"});
  CHECK(spmd::encode(back, "<|begin_of_text|>abc") == std::vector<int64_t>{258, 257});
  CHECK(spmd::decode(back, {258, 256, 259}) == "<|begin_of_text|>ab<|end_of_text|>");
  // sample's prompt starts as every training document did, once.
  CHECK(spmd::prompt_tokens(back, "abc") == std::vector<int64_t>{258, 257});
  CHECK(spmd::prompt_tokens(back, "<|begin_of_text|>abc") == std::vector<int64_t>{258, 257});
  CHECK(spmd::prompt_tokens(back, "") == std::vector<int64_t>{258});
}

TEST_CASE("bpe llama: unsupported tokenizer.json fields are usage errors naming the file and the field") {
  TempDir dir;
  const std::string file = dir.file("tokenizer.json");
  auto check = [&](const Json& j, const std::string& field) {
    const std::string message = error_of(dir, j);
    CAPTURE(message);
    CHECK(message.find(file + ": " + field) != std::string::npos);
  };
  Json j = llama_style_json();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  check(j, "pre_tokenizer.pretokenizers[0].behavior");
  j = llama_style_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};
  check(j, "pre_tokenizer.pretokenizers[0].pattern");
  j = llama_style_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  check(j, "pre_tokenizer.pretokenizers[0].pattern.Regex");
  j = llama_style_json();  // words across the cuts spmd-prepare makes
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[^ ]+";
  CHECK(error_of(dir, j).find("matches across the line break") != std::string::npos);
  j = llama_style_json();
  j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true;
  check(j, "pre_tokenizer.pretokenizers[1].use_regex");
  j = llama_style_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  check(j, "pre_tokenizer.type");
  j = llama_style_json();
  j["added_tokens"][0]["lstrip"] = true;
  check(j, "added_tokens[0].lstrip");
  j = llama_style_json();
  j["model"]["byte_fallback"] = true;
  check(j, "model.byte_fallback");
  j = llama_style_json();
  j["decoder"] = {{"type", "Metaspace"}};
  check(j, "decoder");
  j = llama_style_json();
  j["post_processor"]["processors"][1]["single"].push_back({{"SpecialToken", {{"id", "<|end_of_text|>"}}}});
  check(j, "post_processor.processors[1].single");
  j = llama_style_json();
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  check(j, "post_processor.type");
  j = llama_style_json();
  j["truncation"] = {{"max_length", 8}};
  check(j, "truncation");
}
