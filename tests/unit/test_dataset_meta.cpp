// A meta.json beside the data that spmd-prepare did not write gets a message that says so and what
// to do, never a JSON library's text.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "data/meta.h"
#include "test_support.h"
#include "usage_error.h"

using namespace spmd;

TEST_CASE("dataset meta: another tool's meta.json is named as not ours, with what to do") {
  test::TempDir dir;
  const std::string path = dir.file("meta.json");
  for (const char* text : {R"({"vocab_size": 65, "itos": {"0": "a"}, "stoi": {"a": 0}})", R"([1, 2, 3])",
                           R"({"vocabulary": "byte", "vocab_size": "256"})"}) {
    CAPTURE(text);
    test::write_file(path, text);
    const std::string message = test::usage_error_of([&] { read_meta(path); });
    CHECK(message.find(path + ": not a dataset meta written by spmd-prepare") == 0);
    CHECK(message.find("spmd-prepare (docs/data.md)") != std::string::npos);
    CHECK(message.find("json.exception") == std::string::npos);
  }
}

TEST_CASE("dataset meta: dtype names the token width (uint16 when absent), any other is refused naming the file") {
  test::TempDir dir;
  const std::string path = dir.file("meta.json");
  DatasetMeta meta;
  meta.vocab = VocabKind::kByte;
  meta.vocab_size = 256;
  CHECK(meta_to_json(meta)["dtype"] == "uint16");
  meta.token_width = TokenWidth::kU32;
  CHECK(meta_to_json(meta)["dtype"] == "uint32");
  test::write_file(path, meta_to_json(meta).dump());
  CHECK(read_meta(path).token_width == TokenWidth::kU32);
  CHECK(meta_dtype(path) == TokenWidth::kU32);
  // A meta.json of before uint32 tokens, or another tool's, names no dtype: uint16.
  nlohmann::json old = meta_to_json(meta);
  old.erase("dtype");
  test::write_file(path, old.dump());
  CHECK(read_meta(path).token_width == TokenWidth::kU16);
  CHECK(!meta_dtype(path).has_value());
  test::write_file(path, R"({"vocab_size": 65, "itos": {"0": "a"}})");
  CHECK(!meta_dtype(path).has_value());
  // A dtype this tool does not read; a vocabulary that does not fit its dtype.
  for (const char* dtype : {R"("int64")", R"("float32")", "16", "null"}) {
    CAPTURE(dtype);
    test::write_file(path, std::string(R"({"vocabulary": "byte", "vocab_size": 256, "dtype": )") + dtype + "}");
    const std::string message = test::usage_error_of([&] { meta_dtype(path); });
    CHECK(message.find(path) == 0);
    CHECK(message.find("\"uint16\" or \"uint32\"") != std::string::npos);
    CHECK(test::usage_error_of([&] { read_meta(path); }).find("dtype") != std::string::npos);
  }
  nlohmann::json many = meta_to_json(meta);
  many["vocabulary"] = nlohmann::json::array();
  for (char32_t cp = 0x10000; cp < 0x10000 + 65537; ++cp) {
    std::string s;
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
    many["vocabulary"].push_back(s);
  }
  many["vocab_size"] = 65537;
  many["dtype"] = "uint16";
  test::write_file(path, many.dump());
  CHECK(test::usage_error_of([&] { read_meta(path); }).find("vocab_size 65537 does not fit dtype uint16") !=
        std::string::npos);
  many["dtype"] = "uint32";
  test::write_file(path, many.dump());
  CHECK(read_meta(path).vocab_size == 65537);
}
